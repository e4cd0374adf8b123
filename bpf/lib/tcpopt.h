/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* TCP options the datapath reads: MSS, window scale and timestamps. */
#ifndef M2HO_LIB_TCPOPT_H
#define M2HO_LIB_TCPOPT_H

#include <stdbool.h>
#include <linux/bpf.h>
#include <linux/types.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#define TCPOPT_EOL 0
#define TCPOPT_NOP 1
#define TCPOPT_MSS 2
#define TCPOPT_WINDOW 3
#define TCPOPT_TIMESTAMP 8

#define TCPOLEN_MSS 4
#define TCPOLEN_WINDOW 3
#define TCPOLEN_TIMESTAMP 10
/* NOP, NOP, timestamp: the layout Linux and most stacks put on every
 * segment after the handshake (RFC 7323 appendix A). */
#define TCPOLEN_TSTAMP_ALIGNED 12
#define TCP_MAX_OPTION_BYTES 40
/* RFC 7323 section 2.3: larger shifts are treated as 14. */
#define TCP_MAX_WSCALE 14

struct tcp_options {
	__u32 tsval;
	__u32 tsecr;
	__u16 mss;
	__u8 has_mss;
	__u8 has_wscale;
	__u8 wscale;
	__u8 has_timestamps;
	__u8 pad[2];
};

/* State of the general option scan, driven by bpf_loop so the verifier
 * checks one step instead of every path through up to 40 option bytes. */
struct tcpopt_scan {
	__u8 buf[TCP_MAX_OPTION_BYTES];
	__u32 len;
	__u32 pos;
	struct tcp_options out;
};

static __always_inline __u32 load_be32(const __u8 *p)
{
	return ((__u32)p[0] << 24) | ((__u32)p[1] << 16) | ((__u32)p[2] << 8) | p[3];
}

/* scan_tcp_option reads the option at scan->pos; returning 1 stops the
 * loop. A malformed option ends the scan: what was read before it stays
 * valid, as in the kernel's own parser. */
static long scan_tcp_option(__u64 index, void *ctx)
{
	struct tcpopt_scan *scan = ctx;
	__u32 pos = scan->pos;
	__u32 len = scan->len;

	if (pos >= len || pos >= TCP_MAX_OPTION_BYTES)
		return 1;
	__u8 kind = scan->buf[pos];
	if (kind == TCPOPT_EOL)
		return 1;
	if (kind == TCPOPT_NOP) {
		scan->pos = pos + 1;
		return 0;
	}
	if (pos + 1 >= len || pos + 1 >= TCP_MAX_OPTION_BYTES)
		return 1;
	__u8 opt_len = scan->buf[pos + 1];
	if (opt_len < 2 || pos + opt_len > len)
		return 1;
	if (kind == TCPOPT_MSS && opt_len == TCPOLEN_MSS && pos <= TCP_MAX_OPTION_BYTES - TCPOLEN_MSS) {
		scan->out.mss = ((__u16)scan->buf[pos + 2] << 8) | scan->buf[pos + 3];
		scan->out.has_mss = 1;
	} else if (kind == TCPOPT_WINDOW && opt_len == TCPOLEN_WINDOW &&
		   pos <= TCP_MAX_OPTION_BYTES - TCPOLEN_WINDOW) {
		__u8 shift = scan->buf[pos + 2];
		scan->out.wscale = shift > TCP_MAX_WSCALE ? TCP_MAX_WSCALE : shift;
		scan->out.has_wscale = 1;
	} else if (kind == TCPOPT_TIMESTAMP && opt_len == TCPOLEN_TIMESTAMP &&
		   pos <= TCP_MAX_OPTION_BYTES - TCPOLEN_TIMESTAMP) {
		scan->out.tsval = load_be32(&scan->buf[pos + 2]);
		scan->out.tsecr = load_be32(&scan->buf[pos + 6]);
		scan->out.has_timestamps = 1;
	}
	scan->pos = pos + opt_len;
	return 0;
}

/*
 * parse_tcp_options reads the options of the TCP header at l4_off (opt points
 * right after its fixed part), whose length tcp_len has been checked to lie
 * inside the linear data. MSS and window scale count only on a SYN, so any
 * other segment needs its timestamps alone: when the options open with the
 * aligned-timestamp layout they are read in place, whatever follows (the
 * SACK blocks of duplicate ACKs, typically). A SYN, or options laid out
 * otherwise, are copied out and scanned.
 */
static __always_inline void parse_tcp_options(struct __sk_buff *skb, __u8 *opt, void *data_end, __u32 l4_off,
					      __u32 tcp_len, bool syn, struct tcp_options *out)
{
	__u32 opt_len = tcp_len - 20;
	if (opt_len == 0 || opt_len > TCP_MAX_OPTION_BYTES)
		return;
	bool read_in_place = syn ? opt_len == TCPOLEN_TSTAMP_ALIGNED : opt_len >= TCPOLEN_TSTAMP_ALIGNED;
	if (read_in_place && (void *)(opt + TCPOLEN_TSTAMP_ALIGNED) <= data_end &&
	    opt[0] == TCPOPT_NOP && opt[1] == TCPOPT_NOP && opt[2] == TCPOPT_TIMESTAMP &&
	    opt[3] == TCPOLEN_TIMESTAMP) {
		out->tsval = load_be32(opt + 4);
		out->tsecr = load_be32(opt + 8);
		out->has_timestamps = 1;
		return;
	}

	struct tcpopt_scan scan = {.len = opt_len};
	if (bpf_skb_load_bytes(skb, l4_off + 20, scan.buf, opt_len))
		return;
	bpf_loop(TCP_MAX_OPTION_BYTES, scan_tcp_option, &scan, 0);
	*out = scan.out;
}

#endif /* M2HO_LIB_TCPOPT_H */
