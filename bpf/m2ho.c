// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * m2ho tc programs for the modem-side interface.
 *
 * Egress: receive-window clamp on the host's ACKs, duplicate-ACK
 * suppression after a handover, TSval stamps for RTT measurement.
 * Ingress: per-flow bytes and highest sequence, RTT from echoed TSvals,
 * downlink bursts.
 *
 * Everything fails open: packets the programs do not understand, flows they
 * do not track and policies past their deadline leave the packet untouched.
 */
#include <stdbool.h>
#include <linux/bpf.h>
#include <linux/errno.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "m2ho.h"
#include "lib/csum.h"
#include "lib/parse.h"
#include "lib/tcpopt.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Single loads and stores of fields that another CPU writes concurrently. */
#define READ_ONCE(x) (*(volatile typeof(x) *)&(x))
#define WRITE_ONCE(x, v) (*(volatile typeof(x) *)&(x) = (v))

/* Set by the loader: the link carries bare IP packets (ARPHRD_NONE,
 * ARPHRD_RAWIP), no Ethernet header. */
volatile const __u8 cfg_raw_ip = 0;
/* Set by the loader: idle time that ends a downlink burst. */
volatile const __u64 cfg_burst_gap_ns = 1000000;
/* Set by the loader: the number of possible CPUs, whose per-CPU counters
 * make up a burst. */
volatile const __u32 cfg_nr_cpus = 1;

/* Set by the loader: flow_table's number of buckets minus one (a power of
 * two). */
volatile const __u32 cfg_flow_bucket_mask = 2 * M2HO_DEFAULT_MAX_FLOWS / M2HO_FLOW_BUCKET_SLOTS - 1;
/* Set by the loader: a random seed, so that remote peers cannot choose
 * addresses and ports that crowd one bucket of the flow table. */
volatile const __u64 cfg_flow_hash_seed = 0;

/* Upper bound of cfg_nr_cpus, for the verifier. */
#define M2HO_MAX_CPUS 8192

/* RFC 9293 section 3.7.1 and RFC 8200 section 5: MSS assumed when the SYN
 * carries no MSS option. */
#define DEFAULT_MSS_IPV4 536
#define DEFAULT_MSS_IPV6 1220

/* The loader sizes the table to a power of two of at least twice as many
 * slots as the flow index holds and sets the mask; the defaults here only
 * describe it. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 * M2HO_DEFAULT_MAX_FLOWS / M2HO_FLOW_BUCKET_SLOTS);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct flow_bucket);
} flow_table SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, M2HO_DEFAULT_MAX_FLOWS);
	__type(key, struct flow_key);
	__type(value, __u32);
} flow_index SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct policy);
} policy_map SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct policy_expiry);
} policy_expiry SEC(".maps");

/* Written by user space, at attach and when it evicts an idle flow; read,
 * and emptied, only by flows whose handshake went unseen. When full, the
 * least recently used hint makes room. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, M2HO_DEFAULT_MAX_FLOWS);
	__type(key, struct flow_key);
	__type(value, struct handshake_hint);
} handshake_hints SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct cpu_state);
} cpu_state_map SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct rtt_histogram);
} rtt_hist SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct burst_state);
} burst_map SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, M2HO_BURST_RINGBUF_BYTES);
} bursts SEC(".maps");

/* Emit BTF for the types only user space reads (bpf2go -type needs it). */
const enum flow_flags *btf_flow_flags __attribute__((unused));
const enum flow_tag *btf_flow_tag __attribute__((unused));
const enum clamp_mode *btf_clamp_mode __attribute__((unused));
const enum suppress_mode *btf_suppress_mode __attribute__((unused));
const enum ts_stamp_unit *btf_ts_stamp_unit __attribute__((unused));
const enum dupack_hold *btf_dupack_hold __attribute__((unused));
const struct burst_event *btf_burst_event __attribute__((unused));
const enum counter_id *btf_counter_id __attribute__((unused));

static __always_inline struct cpu_state *this_cpu_state(void)
{
	__u32 zero = 0;
	return bpf_map_lookup_elem(&cpu_state_map, &zero);
}

static __always_inline void count(enum counter_id id)
{
	struct cpu_state *cpu = this_cpu_state();
	if (cpu)
		cpu->counters[id]++;
}

/*
 * coarse_now returns CLOCK_MONOTONIC at the kernel tick's resolution, like
 * bpf_ktime_get_coarse_ns, which it calls only once per tick and CPU: the
 * verifier inlines bpf_jiffies64 into a load, while the helper takes two
 * calls. jiffies moves a moment before the coarse clock at a tick, so a
 * copy read in between lags until the next tick: at most two ticks in all,
 * which last-seen times and policy deadlines can afford.
 */
static __always_inline __u64 coarse_now(struct cpu_state *cpu)
{
	__u64 jiffies = bpf_jiffies64();
	if (cpu->clock_jiffies != jiffies || !cpu->clock_ns) {
		cpu->clock_ns = bpf_ktime_get_coarse_ns();
		cpu->clock_jiffies = jiffies;
	}
	return cpu->clock_ns;
}

/* Flag updates are atomic: ingress and egress of one flow may run on two
 * CPUs at once, and a plain read-modify-write would lose the other's bit.
 * The plain read first keeps the common already-set case free of locked
 * instructions. Setting a flag is also a full barrier, so that a CPU that
 * reads the flag with flow_flags sees what was stored before it (the
 * highest sequence before FLOW_RX_SEQ_VALID and FLOW_PEER_FIN): only the
 * fetch form of the atomic orders memory on every architecture, and clang
 * emits the other form, which orders nothing on arm64, when the result
 * goes unused. */
static __always_inline void flow_set(struct flow_state *flow, __u32 bits)
{
	if ((flow->flags & bits) != bits) {
		__u32 old = __sync_fetch_and_or(&flow->flags, bits);
		asm volatile("" : "+r"(old)); /* the result is used */
	}
}

/* flow_flags reads the flags with a full barrier (a fetch atomic), so
 * that what a flag announces is read after it. */
static __always_inline __u32 flow_flags(struct flow_state *flow)
{
	return __sync_fetch_and_or(&flow->flags, 0);
}

static __always_inline void flow_clear(struct flow_state *flow, __u32 bits)
{
	if (flow->flags & bits)
		__sync_fetch_and_and(&flow->flags, ~bits);
}

/* Serial number arithmetic (RFC 1982) on 32-bit TCP sequence numbers. */
static __always_inline bool seq_after(__u32 a, __u32 b)
{
	return (__s32)(a - b) > 0;
}

static __always_inline bool seq_after_eq(__u32 a, __u32 b)
{
	return (__s32)(a - b) >= 0;
}

static __always_inline void count_parse_failure(int result)
{
	switch (result) {
	case PARSE_NOT_IP:
		count(CNT_NOT_IP);
		break;
	case PARSE_NOT_TCP:
		count(CNT_NOT_TCP);
		break;
	case PARSE_FRAGMENT:
		count(CNT_FRAGMENT);
		break;
	default:
		count(CNT_MALFORMED);
	}
}

/* parse parses skb, pulling non-linear headers into the linear part once. */
static __always_inline int parse(struct __sk_buff *skb, struct packet *pkt, bool egress)
{
	int result = parse_packet(skb, pkt, cfg_raw_ip, egress);
	if (result != PARSE_NEED_PULL)
		return result;
	if (bpf_skb_pull_data(skb, pkt->need))
		return PARSE_MALFORMED;
	result = parse_packet(skb, pkt, cfg_raw_ip, egress);
	return result == PARSE_NEED_PULL ? PARSE_MALFORMED : result;
}

static __always_inline __u16 default_mss(const struct packet *pkt)
{
	return pkt->ipv6 ? DEFAULT_MSS_IPV6 : DEFAULT_MSS_IPV4;
}

#include "lib/flowtable.h"
#include "lib/handshake.h"
#include "lib/rtt.h"
#include "lib/policy.h"
#include "lib/burst.h"

/*
 * seq_plausible says whether a segment ending at end may be one the host
 * accepts: no further from the highest sequence received than the largest
 * window the host can offer at its shift, 1 GiB while the shift is unknown
 * (RFC 7323 section 2.3). That is RFC 9293's acceptability test, loosened
 * to what ingress knows. A segment with a damaged sequence number, or a
 * stray one from an earlier connection on the same ports, would otherwise
 * move highest_rx_seq past anything the host will acknowledge: the flow
 * would then never release itself from suppression, nor close.
 */
static __always_inline bool seq_plausible(const struct flow_state *flow, __u32 end)
{
	if (!(flow->flags & FLOW_RX_SEQ_VALID))
		return true;
	__u8 shift = (flow->flags & FLOW_WSCALE_KNOWN) ? flow->wscale : TCP_MAX_WSCALE;
	__u32 largest = 0xffffU << shift;
	__u32 ahead = end - flow->highest_rx_seq;
	return ahead <= largest || -ahead <= largest;
}

/* touch_flow refreshes a flow's last-seen time. Idle eviction needs no
 * finer grain than a millisecond, and skipping the store on most packets
 * keeps the flow's cache line shared between the CPUs of both directions. */
static __always_inline void touch_flow(struct flow_state *flow, __u64 now)
{
	if ((__s64)(now - flow->last_seen_ns) > 1000000)
		flow->last_seen_ns = now;
}

/* The flow of a TCP segment in either direction, brought up to date with
 * what every segment teaches: handshake options, last-seen time and the
 * policy's handover epoch. NULL when the flow is not tracked, counted
 * unless the segment is a peer's SYN. */
static __always_inline struct flow_state *track_flow(const struct packet *pkt, const struct policy *pol,
						     __u64 now, bool egress)
{
	struct flow_state *flow = lookup_flow(pkt, now, egress);
	if (!flow) {
		/* A peer's SYN asks for a connection the host has yet to
		 * accept: its SYN-ACK creates the flow. */
		if (egress || (pkt->tcp_flags & (TCPF_SYN | TCPF_ACK)) != TCPF_SYN)
			count(CNT_UNTRACKED);
		return NULL;
	}
	learn_handshake(flow, pkt, egress);
	touch_flow(flow, now);
	enter_epoch(flow, pol);
	return flow;
}

SEC("tc")
int m2ho_egress(struct __sk_buff *skb)
{
	struct packet pkt = {};
	struct cpu_state *cpu = this_cpu_state();
	if (!cpu)
		return TC_ACT_UNSPEC;
	cpu->counters[CNT_EGRESS_PACKETS]++;
	int result = parse(skb, &pkt, true);
	if (result != PARSE_TCP) {
		count_parse_failure(result);
		return TC_ACT_UNSPEC;
	}
	struct policy *pol = current_policy();
	if (!pol)
		return TC_ACT_UNSPEC;
	/* The coarse clock (same base, at most two ticks behind) is precise
	 * enough for last-seen times and policy deadlines and costs next to
	 * nothing; TSval stamps read the precise clock themselves. */
	__u64 now = coarse_now(cpu);
	struct flow_state *flow = track_flow(&pkt, pol, now, true);
	if (!flow)
		return TC_ACT_UNSPEC;
	note_close(flow, &pkt, true);

	bool plain_ack = (pkt.tcp_flags & TCPF_ACK) && !(pkt.tcp_flags & (TCPF_SYN | TCPF_RST));
	if (plain_ack)
		note_hole(flow, &pkt, now);
	if (plain_ack && suppress_dupack(flow, &pkt, pol, now)) {
		count(CNT_DUPACK_SUPPRESSED);
		return TC_ACT_SHOT;
	}
	/* after the drop: the peer never echoes the TSval of a dropped ACK */
	stamp_tsval(flow, &pkt);
	if (!plain_ack)
		return TC_ACT_UNSPEC;
	if (hides_sack(flow, &pkt, pol, now)) {
		int stripped = strip_sack(skb, pkt.l4_off, pkt.tcp_len);
		if (stripped > 0)
			count(CNT_SACK_HIDDEN);
		else if (stripped < 0)
			count(CNT_REWRITE_FAILED);
	}
	if (!(flow->flags & FLOW_ACK_VALID) || pkt.ack != flow->last_ack) {
		flow->ack_moved = stamp_time(now);
		flow->hole_seen = 0;
	}
	flow->last_ack = pkt.ack;
	flow_set(flow, FLOW_ACK_VALID);
	apply_clamp(skb, flow, &pkt, pol, now);
	return TC_ACT_UNSPEC;
}

SEC("tc")
int m2ho_ingress(struct __sk_buff *skb)
{
	struct packet pkt = {};
	__u64 now = bpf_ktime_get_ns();
	int result = parse(skb, &pkt, false);
	/* bursts cover every downlink packet, whatever its protocol */
	__u32 l2_len = result == PARSE_NOT_IP || result == PARSE_MALFORMED ? 0 : pkt.l3_off;
	__u32 ip_bytes = skb->len - l2_len;
	struct cpu_state *cpu = this_cpu_state();
	if (cpu) {
		cpu->counters[CNT_INGRESS_PACKETS]++;
		cpu->counters[CNT_INGRESS_BYTES] += ip_bytes;
		account_burst(cpu, now, ip_bytes);
	}
	if (result != PARSE_TCP) {
		count_parse_failure(result);
		return TC_ACT_UNSPEC;
	}
	struct policy *pol = current_policy();
	if (!pol)
		return TC_ACT_UNSPEC;
	struct flow_state *flow = track_flow(&pkt, pol, now, false);
	if (!flow)
		return TC_ACT_UNSPEC;

	flow->rx_bytes += pkt.payload_len;
	flow->rx_packets++;
	__u32 end = pkt.seq + pkt.payload_len + ((pkt.tcp_flags & TCPF_SYN) ? 1 : 0) +
		    ((pkt.tcp_flags & TCPF_FIN) ? 1 : 0);
	if (!seq_plausible(flow, end)) {
		count(CNT_SEQ_IMPLAUSIBLE);
	} else {
		if (end != pkt.seq &&
		    (!(flow->flags & FLOW_RX_SEQ_VALID) || seq_after(end, flow->highest_rx_seq))) {
			flow->highest_rx_seq = end;
			flow_set(flow, FLOW_RX_SEQ_VALID);
		}
		if (pkt.tcp_flags & (TCPF_FIN | TCPF_RST))
			note_close(flow, &pkt, false);
	}
	match_tsecr(flow, &pkt, now);
	return TC_ACT_UNSPEC;
}
