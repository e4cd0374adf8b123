/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* TCP options the datapath reads (MSS, window scale and timestamps) and
 * the one it blanks (SACK). */
#ifndef M2HO_LIB_TCPOPT_H
#define M2HO_LIB_TCPOPT_H

#include <stdbool.h>
#include <linux/bpf.h>
#include <linux/types.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "csum.h"

#define TCPOPT_EOL 0
#define TCPOPT_NOP 1
#define TCPOPT_MSS 2
#define TCPOPT_WINDOW 3
#define TCPOPT_SACK 5
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

/* option_at reads the kind of the option at pos of buf, whose options
 * are len bytes, and the bytes it spans (1 for a NOP). It returns false
 * at the end of the options or at a malformed option, which ends a scan:
 * what was read before it stays valid, as in the kernel's own parser. */
static __always_inline bool option_at(const __u8 *buf, __u32 len, __u32 pos, __u8 *kind, __u32 *size)
{
	if (pos >= len || pos >= TCP_MAX_OPTION_BYTES)
		return false;
	*kind = buf[pos];
	if (*kind == TCPOPT_EOL)
		return false;
	if (*kind == TCPOPT_NOP) {
		*size = 1;
		return true;
	}
	if (pos + 1 >= len || pos + 1 >= TCP_MAX_OPTION_BYTES)
		return false;
	__u8 opt_len = buf[pos + 1];
	if (opt_len < 2 || pos + opt_len > len)
		return false;
	*size = opt_len;
	return true;
}

/* scan_tcp_option reads the option at scan->pos; returning 1 stops the
 * loop. */
static long scan_tcp_option(__u64 index, void *ctx)
{
	struct tcpopt_scan *scan = ctx;
	__u32 pos = scan->pos;
	__u8 kind;
	__u32 opt_len;

	if (!option_at(scan->buf, scan->len, pos, &kind, &opt_len))
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

/* State of the search for a SACK option, driven by bpf_loop as the scan
 * above. old holds the options as they are, new as they leave. */
struct sack_search {
	__u8 old[TCP_MAX_OPTION_BYTES];
	__u8 new[TCP_MAX_OPTION_BYTES];
	__u32 len;
	__u32 pos;
	__u32 sack_pos;
	__u32 sack_len; /* 0: no SACK option */
};

/* find_sack_option steps over the option at search->pos; returning 1 stops
 * the loop, at the first SACK option or at the end of the options. */
static long find_sack_option(__u64 index, void *ctx)
{
	struct sack_search *search = ctx;
	__u32 pos = search->pos;
	__u8 kind;
	__u32 opt_len;

	if (!option_at(search->old, search->len, pos, &kind, &opt_len))
		return 1;
	if (kind == TCPOPT_SACK) {
		search->sack_pos = pos;
		search->sack_len = opt_len;
		return 1;
	}
	search->pos = pos + opt_len;
	return 0;
}

/* blank_sack_byte turns byte index of the options into a NOP when it lies
 * inside the SACK option found. */
static long blank_sack_byte(__u64 index, void *ctx)
{
	struct sack_search *search = ctx;
	if (index >= TCP_MAX_OPTION_BYTES)
		return 1;
	search->new[index] = index >= search->sack_pos && index < search->sack_pos + search->sack_len
				     ? TCPOPT_NOP
				     : search->old[index];
	return 0;
}

/*
 * strip_sack replaces the SACK option of the TCP header at l4_off, of
 * tcp_len bytes, with NOPs: the segment keeps its length, its other options
 * and its acknowledgement, and tells the sender nothing of what arrived
 * above it. The checksum is updated by the difference of the options
 * before and after (a TCP header is a whole number of 32-bit words, and so
 * are its options), then the options are stored. Returns 1 when a SACK
 * option was blanked, 0 when there was none, a negative error when a helper
 * failed (the segment is then unchanged, or changed in its checksum only
 * when the store failed).
 */
static __always_inline int strip_sack(struct __sk_buff *skb, __u32 l4_off, __u32 tcp_len)
{
	__u32 opt_len = tcp_len - 20;
	if (tcp_len <= 20 || opt_len > TCP_MAX_OPTION_BYTES)
		return 0;
	struct sack_search search = {.len = opt_len};
	if (bpf_skb_load_bytes(skb, l4_off + 20, search.old, opt_len))
		return -1;
	bpf_loop(TCP_MAX_OPTION_BYTES, find_sack_option, &search, 0);
	if (!search.sack_len)
		return 0;
	bpf_loop(TCP_MAX_OPTION_BYTES, blank_sack_byte, &search, 0);
	__s64 diff = bpf_csum_diff((__be32 *)search.old, opt_len, (__be32 *)search.new, opt_len, 0);
	if (diff < 0)
		return (int)diff;
	int err = bpf_l4_csum_replace(skb, l4_off + TCP_CHECKSUM_OFFSET, 0, (__u64)diff, 0);
	if (err)
		return err;
	err = bpf_skb_store_bytes(skb, l4_off + 20, search.new, opt_len, 0);
	return err ? err : 1;
}

#endif /* M2HO_LIB_TCPOPT_H */
