/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The kernel types a TCP congestion control written as BPF struct_ops
 * touches, reduced to the members it uses. preserve_access_index makes
 * every access a CO-RE relocation: the loader fixes the offsets against
 * the running kernel's BTF, so no vmlinux.h is needed and the object
 * does not depend on the machine that built it.
 */
#ifndef M2HO_CC_TCP_CA_H
#define M2HO_CC_TCP_CA_H

#include <linux/types.h>

#define TCP_CA_NAME_MAX 16

/* enum tcp_ca_event and enum tcp_ca_state (include/net/tcp.h, uapi tcp.h) */
#define CA_EVENT_TX_START 0
#define TCP_CA_CWR 2
#define TCP_CA_Loss 4
/* include/net/tcp.h: no ssthresh Linux assigns is larger. */
#define TCP_INFINITE_SSTHRESH 0x7fffffffU

struct sock_common {
} __attribute__((preserve_access_index));

struct sock {
	struct sock_common __sk_common;
} __attribute__((preserve_access_index));

struct inet_connection_sock {
	__u8 icsk_ca_state : 5;
	__u64 icsk_ca_priv[13];
} __attribute__((preserve_access_index));

struct tcp_sock {
	struct inet_connection_sock inet_conn;
	__u32 snd_cwnd;
	__u32 snd_ssthresh;
	__u32 snd_nxt;
	__u32 snd_una;
	__u32 prior_cwnd;
	__u32 max_packets_out;
	__u8 is_cwnd_limited : 1;
	__u64 tcp_mstamp;
} __attribute__((preserve_access_index));

struct ack_sample {
	__u32 pkts_acked;
	__s32 rtt_us;
	__u32 in_flight;
} __attribute__((preserve_access_index));

struct tcp_congestion_ops {
	__u32 (*ssthresh)(struct sock *sk);
	void (*cong_avoid)(struct sock *sk, __u32 ack, __u32 acked);
	void (*set_state)(struct sock *sk, __u8 new_state);
	void (*cwnd_event)(struct sock *sk, int ev);
	void (*pkts_acked)(struct sock *sk, const struct ack_sample *sample);
	__u32 (*undo_cwnd)(struct sock *sk);
	void (*init)(struct sock *sk);
	char name[TCP_CA_NAME_MAX];
} __attribute__((preserve_access_index));

/* The kernel's helpers for congestion controls (net/ipv4/bpf_tcp_ca.c). */
extern __u32 tcp_slow_start(struct tcp_sock *tp, __u32 acked) __ksym;
extern void tcp_cong_avoid_ai(struct tcp_sock *tp, __u32 w, __u32 acked) __ksym;

#endif
