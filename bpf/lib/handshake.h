/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * What a flow learns from its handshake (window scale, MSS), a handshake
 * adopted from user space for a connection opened before the programs, and
 * the end of a connection.
 *
 * Part of m2ho.c, which includes it after its maps and helpers.
 */
#ifndef M2HO_LIB_HANDSHAKE_H
#define M2HO_LIB_HANDSHAKE_H

/*
 * learn_handshake records the host's window scale and MSS. Scaling is in
 * effect only when both SYNs carry the option (RFC 7323 section 2.2): the
 * host's SYN-ACK carries it only if the peer's SYN did, while an offer in the
 * host's SYN must wait for the peer's SYN-ACK. A copy of the host's SYN
 * teaches nothing the first did not, and the peer's answer to the first
 * may already have settled the scale.
 */
static __always_inline void learn_handshake(struct flow_state *flow, const struct packet *pkt, bool egress)
{
	if (!(pkt->tcp_flags & TCPF_SYN))
		return;
	if (egress) {
		if (repeats_host_syn(flow, pkt))
			return;
		flow->host_syn_seq = pkt->seq;
		flow_set(flow, FLOW_HOST_SYN);
		/* a zero MSS option would remove the one-segment floor */
		flow->mss = pkt->opts.has_mss && pkt->opts.mss ? pkt->opts.mss : default_mss(pkt);
		flow->wscale = pkt->opts.has_wscale ? pkt->opts.wscale : 0;
		if ((pkt->tcp_flags & TCPF_ACK) || !pkt->opts.has_wscale)
			flow_set(flow, FLOW_WSCALE_KNOWN);
		else
			flow_set(flow, FLOW_WSCALE_OFFERED);
		return;
	}
	if ((pkt->tcp_flags & TCPF_ACK) && (flow->flags & FLOW_WSCALE_OFFERED)) {
		if (!pkt->opts.has_wscale)
			flow->wscale = 0;
		flow_set(flow, FLOW_WSCALE_KNOWN);
		flow_clear(flow, FLOW_WSCALE_OFFERED);
	}
}

/*
 * note_close marks a flow whose connection has ended, so that user space
 * neither waits for it to leave suppression nor keeps it for the whole idle
 * time. A RST either way ends it. A FIN ends only what its sender sends:
 * the peer's FIN ends the flow once the host acknowledges it, that is once
 * everything the peer sent has arrived. Ingress marks the FIN after
 * highest_rx_seq counts it, and egress reads the mark again with a full
 * barrier before the sequence (flow_set, flow_flags), so egress never
 * holds an ACK against the sequence from before the FIN.
 */
static __always_inline void note_close(struct flow_state *flow, const struct packet *pkt, bool egress)
{
	if (flow->flags & FLOW_CLOSED)
		return;
	bool closed = pkt->tcp_flags & TCPF_RST;
	if (!closed && !egress) {
		if (pkt->tcp_flags & TCPF_FIN)
			flow_set(flow, FLOW_PEER_FIN);
		return;
	}
	if (!closed)
		closed = (flow->flags & FLOW_PEER_FIN) && (pkt->tcp_flags & TCPF_ACK) &&
			 (flow_flags(flow) & FLOW_PEER_FIN) &&
			 seq_after_eq(pkt->ack, READ_ONCE(flow->highest_rx_seq));
	/* both directions may see the end at once; one counts it */
	if (closed && !(__sync_fetch_and_or(&flow->flags, FLOW_CLOSED) & FLOW_CLOSED))
		count(CNT_FLOW_CLOSED);
}

/*
 * adopt_handshake gives a flow whose handshake went unseen the scale and
 * MSS user space found for its connection, if it found them. Only the
 * clamp needs them, so only the clamp asks, once per flow.
 */
static __always_inline bool adopt_handshake(struct flow_state *flow, const struct packet *pkt)
{
	struct handshake_hint *hint = bpf_map_lookup_elem(&handshake_hints, &pkt->key);
	if (!hint)
		return false;
	/* as for a shift read from a SYN (RFC 7323 section 2.3) */
	flow->wscale = hint->wscale > TCP_MAX_WSCALE ? TCP_MAX_WSCALE : hint->wscale;
	flow->mss = hint->mss ? hint->mss : default_mss(pkt);
	flow_set(flow, FLOW_WSCALE_KNOWN);
	bpf_map_delete_elem(&handshake_hints, &pkt->key);
	count(CNT_WSCALE_ADOPTED);
	return true;
}

#endif
