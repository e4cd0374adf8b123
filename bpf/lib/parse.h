/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Header parsing for tc programs: optional Ethernet with up to two VLAN
 * tags (802.1Q / 802.1ad) or raw IP, IPv4 with options or IPv6 with a
 * bounded walk over extension headers, then TCP with its options.
 *
 * Parsing uses direct packet access. When the headers are not all in the
 * linear part of the skb, the parser reports how many bytes it needs and
 * the caller pulls them once and parses again.
 */
#ifndef M2HO_LIB_PARSE_H
#define M2HO_LIB_PARSE_H

#include <stdbool.h>
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/tcp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "../m2ho.h"
#include "tcpopt.h"

#ifndef ETH_P_8021AD
#define ETH_P_8021AD 0x88A8
#endif

#define MAX_VLAN_TAGS 2
#define MAX_IPV6_EXT_HEADERS 6
/* Offsets beyond this are not plausible headers (and bound the verifier). */
#define MAX_L4_OFFSET 512

enum parse_result {
	PARSE_TCP,
	PARSE_NOT_IP,
	PARSE_NOT_TCP,
	PARSE_MALFORMED,
	PARSE_FRAGMENT,
	/* headers continue past the linear data: pull packet->need bytes */
	PARSE_NEED_PULL,
};

struct vlan_tag {
	__be16 tci;
	__be16 encapsulated_proto;
};

/* A parsed packet. Addresses and ports are already oriented so that
 * key.local_* is the host side whatever the direction. */
struct packet {
	struct flow_key key;
	__u32 l3_off;      /* start of the IP header */
	__u32 l4_off;      /* start of the TCP header */
	__u32 need;        /* bytes to pull for PARSE_NEED_PULL */
	__u32 payload_len; /* TCP payload bytes */
	__u32 seq;
	__u32 ack;
	__u16 window;      /* raw field, host byte order */
	__u16 tcp_len;     /* TCP header length in bytes */
	__u8 tcp_flags;    /* byte 13 of the TCP header */
	__u8 ipv6;
	__u8 pad[2];
	struct tcp_options opts;
};

#define TCPF_FIN 0x01
#define TCPF_SYN 0x02
#define TCPF_RST 0x04
#define TCPF_PSH 0x08
#define TCPF_ACK 0x10

static __always_inline int parse_need(struct __sk_buff *skb, struct packet *pkt, __u32 len)
{
	if (len > skb->len)
		return PARSE_MALFORMED;
	pkt->need = len;
	return PARSE_NEED_PULL;
}

/*
 * ip_length is the length a packet states in its IP header (field, from
 * offset from on), or, when it states 0, the length from there to the
 * packet's end: BIG TCP lets GSO and GRO packets grow past the 64 KB a
 * length field can hold, and then sets the field to 0 (for IPv6 in the
 * stack's own packets, with or without a jumbo payload option). Only a GSO
 * packet may do so; for any other the 0 stands, and the packet is
 * malformed.
 */
static __always_inline __u32 ip_length(struct __sk_buff *skb, __u32 field, __u32 from)
{
	if (field)
		return field;
	return skb->gso_size ? skb->len - from : 0;
}

/* map_ipv4 writes addr as ::ffff:a.b.c.d in whole words (dst is aligned,
 * see struct flow_key). */
static __always_inline void map_ipv4(__u8 *dst, __be32 addr)
{
	__u32 *words = (__u32 *)dst;
	words[0] = 0;
	words[1] = 0;
	words[2] = bpf_htonl(0x0000ffff);
	words[3] = addr;
}

/* set_ports writes both ports with one 32-bit store, for the reason given
 * at struct flow_key. */
static __always_inline void set_ports(struct flow_key *key, __be16 local, __be16 remote)
{
	__u32 local_port = bpf_ntohs(local);
	__u32 remote_port = bpf_ntohs(remote);
	/* local_port comes first in memory */
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	*(__u32 *)&key->local_port = local_port | (remote_port << 16);
#else
	*(__u32 *)&key->local_port = (local_port << 16) | remote_port;
#endif
}

/*
 * parse_packet fills pkt from skb. raw_ip says the link has no L2 header;
 * egress says the packet leaves the host (source = local side).
 */
static __always_inline int parse_packet(struct __sk_buff *skb, struct packet *pkt, bool raw_ip, bool egress)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	__u32 off = 0;
	__u16 proto;
	__u32 ip_payload_end; /* offset where the IP payload ends */
	__u8 l4_proto;

	if (raw_ip) {
		__u8 *first = data;
		if ((void *)(first + 1) > data_end)
			return parse_need(skb, pkt, 1);
		switch (*first >> 4) {
		case 4:
			proto = ETH_P_IP;
			break;
		case 6:
			proto = ETH_P_IPV6;
			break;
		default:
			return PARSE_NOT_IP;
		}
	} else {
		struct ethhdr *eth = data;
		if ((void *)(eth + 1) > data_end)
			return parse_need(skb, pkt, sizeof(*eth));
		proto = bpf_ntohs(eth->h_proto);
		off = sizeof(*eth);
#pragma unroll
		for (int i = 0; i < MAX_VLAN_TAGS; i++) {
			if (proto != ETH_P_8021Q && proto != ETH_P_8021AD)
				break;
			struct vlan_tag *tag = data + off;
			if ((void *)(tag + 1) > data_end)
				return parse_need(skb, pkt, off + sizeof(*tag));
			proto = bpf_ntohs(tag->encapsulated_proto);
			off += sizeof(*tag);
		}
	}
	pkt->l3_off = off;

	if (proto == ETH_P_IP) {
		struct iphdr *iph = data + off;
		if ((void *)(iph + 1) > data_end)
			return parse_need(skb, pkt, off + sizeof(*iph));
		__u32 ihl = iph->ihl * 4;
		__u32 tot_len = ip_length(skb, bpf_ntohs(iph->tot_len), off);
		if (iph->version != 4 || ihl < sizeof(*iph) || tot_len < ihl || off + tot_len > skb->len)
			return PARSE_MALFORMED;
		/* any fragment: more-fragments set or a non-zero offset */
		if (iph->frag_off & bpf_htons(0x3fff))
			return PARSE_FRAGMENT;
		if (iph->protocol != IPPROTO_TCP)
			return PARSE_NOT_TCP;
		if (egress) {
			map_ipv4(pkt->key.local_addr, iph->saddr);
			map_ipv4(pkt->key.remote_addr, iph->daddr);
		} else {
			map_ipv4(pkt->key.local_addr, iph->daddr);
			map_ipv4(pkt->key.remote_addr, iph->saddr);
		}
		pkt->ipv6 = 0;
		pkt->l4_off = off + ihl;
		ip_payload_end = off + tot_len;
	} else if (proto == ETH_P_IPV6) {
		struct ipv6hdr *ip6h = data + off;
		if ((void *)(ip6h + 1) > data_end)
			return parse_need(skb, pkt, off + sizeof(*ip6h));
		ip_payload_end = off + sizeof(*ip6h) + ip_length(skb, bpf_ntohs(ip6h->payload_len), off + sizeof(*ip6h));
		if (ip6h->version != 6 || ip_payload_end > skb->len)
			return PARSE_MALFORMED;
		if (egress) {
			__builtin_memcpy(pkt->key.local_addr, &ip6h->saddr, 16);
			__builtin_memcpy(pkt->key.remote_addr, &ip6h->daddr, 16);
		} else {
			__builtin_memcpy(pkt->key.local_addr, &ip6h->daddr, 16);
			__builtin_memcpy(pkt->key.remote_addr, &ip6h->saddr, 16);
		}
		pkt->ipv6 = 1;
		l4_proto = ip6h->nexthdr;
		__u32 l4 = off + sizeof(*ip6h);
		int i;
		for (i = 0; i < MAX_IPV6_EXT_HEADERS; i++) {
			if (l4_proto == IPPROTO_TCP)
				break;
			if (l4_proto == IPPROTO_FRAGMENT)
				return PARSE_FRAGMENT;
			if (l4_proto != IPPROTO_HOPOPTS && l4_proto != IPPROTO_ROUTING &&
			    l4_proto != IPPROTO_DSTOPTS && l4_proto != IPPROTO_AH)
				return PARSE_NOT_TCP;
			if (l4 > MAX_L4_OFFSET)
				return PARSE_MALFORMED;
			__u8 *ext = data + l4;
			if ((void *)(ext + 2) > data_end)
				return parse_need(skb, pkt, l4 + 2);
			__u32 ext_len = l4_proto == IPPROTO_AH ? (ext[1] + 2) * 4 : (ext[1] + 1) * 8;
			l4_proto = ext[0];
			l4 += ext_len;
		}
		if (l4_proto != IPPROTO_TCP)
			return i == MAX_IPV6_EXT_HEADERS ? PARSE_MALFORMED : PARSE_NOT_TCP;
		pkt->l4_off = l4;
	} else {
		return PARSE_NOT_IP;
	}

	__u32 l4_off = pkt->l4_off;
	if (l4_off > MAX_L4_OFFSET)
		return PARSE_MALFORMED;
	struct tcphdr *th = data + l4_off;
	if ((void *)(th + 1) > data_end)
		return parse_need(skb, pkt, l4_off + sizeof(*th));
	__u32 tcp_len = th->doff * 4;
	if (tcp_len < sizeof(*th) || l4_off + tcp_len > ip_payload_end)
		return PARSE_MALFORMED;
	if ((void *)th + tcp_len > data_end)
		return parse_need(skb, pkt, l4_off + tcp_len);

	pkt->tcp_len = tcp_len;
	pkt->payload_len = ip_payload_end - l4_off - tcp_len;
	pkt->seq = bpf_ntohl(th->seq);
	pkt->ack = bpf_ntohl(th->ack_seq);
	pkt->window = bpf_ntohs(th->window);
	pkt->tcp_flags = ((__u8 *)th)[13];
	if (egress)
		set_ports(&pkt->key, th->source, th->dest);
	else
		set_ports(&pkt->key, th->dest, th->source);
	parse_tcp_options(skb, (__u8 *)(th + 1), data_end, l4_off, tcp_len, pkt->tcp_flags & TCPF_SYN, &pkt->opts);
	return PARSE_TCP;
}

#endif /* M2HO_LIB_PARSE_H */
