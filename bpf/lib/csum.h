/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Rewriting a 16-bit TCP header field with an incremental checksum update. */
#ifndef M2HO_LIB_CSUM_H
#define M2HO_LIB_CSUM_H

#include <linux/bpf.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#define TCP_WINDOW_OFFSET 14
#define TCP_CHECKSUM_OFFSET 16

/*
 * rewrite_tcp_window replaces the window field of the TCP header at l4_off.
 * The checksum is updated first (RFC 1624 incremental update; the helper
 * leaves CHECKSUM_PARTIAL packets alone since the checksum is computed over
 * the final bytes later), then the field is stored; both helpers re-check
 * that the offsets lie inside the packet and make it writable.
 */
static __always_inline int rewrite_tcp_window(struct __sk_buff *skb, __u32 l4_off, __u16 old_window,
					      __u16 new_window)
{
	__be16 old_be = bpf_htons(old_window);
	__be16 new_be = bpf_htons(new_window);
	int err = bpf_l4_csum_replace(skb, l4_off + TCP_CHECKSUM_OFFSET, old_be, new_be, sizeof(new_be));
	if (err)
		return err;
	return bpf_skb_store_bytes(skb, l4_off + TCP_WINDOW_OFFSET, &new_be, sizeof(new_be), 0);
}

#endif /* M2HO_LIB_CSUM_H */
