/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The policy m2hod writes and what it does to a flow: epochs and their
 * snapshots, the advertised window clamp, duplicate-ACK suppression.
 *
 * Part of m2ho.c, which includes it after its maps and helpers.
 */
#ifndef M2HO_LIB_POLICY_H
#define M2HO_LIB_POLICY_H

/*
 * enter_epoch snapshots the highest received sequence the first time a flow
 * is seen in a new handover epoch, before the packet is accounted. A flow
 * that had received nothing has nothing to protect and starts released.
 */
static __always_inline void enter_epoch(struct flow_state *flow, const struct policy *pol)
{
	if (flow->epoch == pol->epoch)
		return;
	flow->epoch = pol->epoch;
	/* The flag before the sequence: a first data segment arriving on
	 * another CPU in between would otherwise leave a snapshot of 0 on a
	 * flow held in suppression. */
	bool received = flow_flags(flow) & FLOW_RX_SEQ_VALID;
	flow->snapshot_rx_seq = READ_ONCE(flow->highest_rx_seq);
	if (received)
		flow_clear(flow, FLOW_RELEASED);
	else
		flow_set(flow, FLOW_RELEASED);
	count(CNT_SNAPSHOTS);
}

/*
 * policy_live says whether a policy part is in force. The first packet to
 * see a deadline pass counts the expiry, by moving the part's expiry mark
 * to that deadline. A zero deadline is no expiry: it is a part user space
 * is clearing, read halfway through the write.
 */
static __always_inline bool policy_live(__u64 deadline_ns, bool clamp, __u64 now)
{
	if (now <= deadline_ns)
		return true;
	__u32 zero = 0;
	struct policy_expiry *expiry = bpf_map_lookup_elem(&policy_expiry, &zero);
	if (!deadline_ns || !expiry)
		return false;
	__u64 *mark = clamp ? &expiry->clamp_deadline_ns : &expiry->suppress_deadline_ns;
	__u64 counted = READ_ONCE(*mark);
	if (counted != deadline_ns && __sync_val_compare_and_swap(mark, counted, deadline_ns) == counted)
		count(clamp ? CNT_CLAMP_EXPIRED : CNT_SUPPRESS_EXPIRED);
	return false;
}

/*
 * repeats_last_ack says whether pkt is a pure ACK (no payload, no SYN, FIN
 * or RST) with the acknowledgement of the last ACK let through: a
 * duplicate, or a window update.
 */
static __always_inline bool repeats_last_ack(const struct flow_state *flow, const struct packet *pkt)
{
	bool pure = pkt->payload_len == 0 && !(pkt->tcp_flags & (TCPF_SYN | TCPF_FIN | TCPF_RST));
	return pure && (flow->flags & FLOW_ACK_VALID) && pkt->ack == flow->last_ack;
}

/*
 * note_hole records when the flow's current hole showed: the first pure
 * ACK repeating the last one while data above it has arrived. Every such
 * ACK is a duplicate the sender counts, whether suppression is on or
 * not, so a hole that opened before suppression began is known as such.
 * Only a repeated ACK reads ingress's sequence; the ACK that moves the
 * acknowledgement clears the mark (m2ho_egress).
 */
static __always_inline void note_hole(struct flow_state *flow, const struct packet *pkt, __u64 now)
{
	if (!repeats_last_ack(flow, pkt) || flow->hole_seen)
		return;
	if ((flow_flags(flow) & FLOW_RX_SEQ_VALID) && seq_after(READ_ONCE(flow->highest_rx_seq), pkt->ack))
		flow->hole_seen = stamp_time(now);
}

/*
 * suppress_dupack decides whether an egress ACK is a duplicate to drop. The
 * window is not compared, although RFC 5681 counts a window update as no
 * duplicate: during a hole, such an ACK carries the same SACK blocks as the
 * duplicates around it, and SACK-based loss detection (RACK) at the sender
 * would mark the hole lost from them alone. Without a hole (nothing
 * received above the acknowledgement) an ACK repeating the last one is a
 * window update, which a sender limited by the window waits for: it
 * always passes.
 */
static __always_inline bool suppress_dupack(struct flow_state *flow, const struct packet *pkt,
					    struct policy *pol, __u64 now)
{
	__u32 mode = pol->suppress_mode;
	if (mode == SUPPRESS_OFF || !policy_live(pol->suppress_deadline_ns, false, now))
		return false;
	if (mode == SUPPRESS_HANDOVER) {
		if (flow->flags & FLOW_RELEASED)
			return false;
		/* Everything received before the epoch is acknowledged, and
		 * either more besides, or nothing arrived above it: a hole from
		 * here on is a real loss, which the sender must hear of at once.
		 * The epoch opens at the execution, after the context release
		 * of the command began delivering out of order, so the hole of
		 * that release lies below the snapshot. */
		__u32 snapshot = flow->snapshot_rx_seq;
		if (seq_after(pkt->ack, snapshot) ||
		    (pkt->ack == snapshot && seq_after_eq(pkt->ack, READ_ONCE(flow->highest_rx_seq)))) {
			flow_set(flow, FLOW_RELEASED);
			count(CNT_FLOW_RELEASED);
			return false;
		}
	}
	if (!repeats_last_ack(flow, pkt) || !flow->hole_seen)
		return false;
	/* The hold counts from the ACK that last moved the acknowledgement,
	 * which restarted the sender's retransmission timer: a hole from
	 * the prediction on is held through the command, the execution and
	 * Smoothing, and never long enough for that timer. A hole whose
	 * first duplicate left before the prediction is not the handover's.
	 * The acknowledgement's own age says nothing of that: a cell that
	 * delivered nothing for a while before the command left the ACK
	 * standing with no hole, until the context release opened one. A
	 * negative time since the ACK moved is one that moved more than 36
	 * minutes ago. */
	__s32 held = stamp_time(now) - flow->ack_moved;
	if (mode == SUPPRESS_PREPARATION && (__s32)(flow->hole_seen - stamp_time(pol->suppress_since_ns)) < 0)
		return false;
	__s64 hold = (__s64)DUPACK_HOLD_MS * 1000000;
	__u64 srtt = READ_ONCE(flow->srtt_ns);
	if (srtt && (__s64)(2 * srtt) < hold)
		hold = 2 * srtt;
	if (held < 0 || (__s64)held << TS_STAMP_SHIFT >= hold) {
		count(CNT_DUPACK_HOLD_EXPIRED);
		return false;
	}
	return true;
}

/*
 * hides_sack says whether an egress ACK that moves the acknowledgement must
 * leave without its SACK blocks. While suppression holds the flow and data
 * above the new acknowledgement has arrived, the ACK stands at a hole: the
 * first ACK the receiver sends after the context release began delivering
 * out of order still acknowledges what came in order before it, so it
 * passes as no duplicate, but its SACK blocks tell the sender of the data
 * beyond the hole, and RACK marks the hole lost a quarter of RTT_min
 * later. In the testbed, 16 of the 19 handovers that m2ho's senders went
 * through without a dropped packet but not without a retransmission took
 * exactly one, 25 to 77 ms after the execution (m2hod 86b787a,
 * docs/results/eval-86b787a), with no duplicate ACK let through in the one
 * traced (walking seed 6, handover 7): a fast retransmit and a window cut,
 * undone once the held data arrived. The ACK's progress still reaches the
 * sender; the same rules as the duplicates' decide (suppress_dupack, which
 * runs first and releases the flow whose ACK passed the snapshot): a
 * Preparation hides only a hole that showed since it began, or one no
 * duplicate showed yet.
 */
static __always_inline bool hides_sack(struct flow_state *flow, const struct packet *pkt,
				       const struct policy *pol, __u64 now)
{
	__u32 mode = pol->suppress_mode;
	if (mode == SUPPRESS_OFF || pkt->tcp_len <= 20 || repeats_last_ack(flow, pkt))
		return false;
	if (!(flow_flags(flow) & FLOW_RX_SEQ_VALID) || !seq_after(READ_ONCE(flow->highest_rx_seq), pkt->ack))
		return false;
	if (!policy_live(pol->suppress_deadline_ns, false, now))
		return false;
	if (mode == SUPPRESS_HANDOVER)
		return !(flow_flags(flow) & FLOW_RELEASED);
	return !flow->hole_seen || (__s32)(flow->hole_seen - stamp_time(pol->suppress_since_ns)) >= 0;
}

/*
 * clamped_window returns the window field to advertise: min(own, clamp)
 * in units of the flow's scale, never below one MSS (rounded up so the
 * scaled window still holds a full segment) unless freezing.
 */
static __always_inline __u16 clamped_window(__u16 own, __u8 shift, __u32 clamp_bytes, __u16 mss, bool freeze)
{
	if (freeze)
		return 0;
	__u32 limit = clamp_bytes >> shift;
	__u32 floor = ((__u32)mss + (1U << shift) - 1) >> shift;
	if (limit < floor)
		limit = floor;
	return own <= limit ? own : (__u16)limit;
}

static __always_inline void apply_clamp(struct __sk_buff *skb, struct flow_state *flow, const struct packet *pkt,
					struct policy *pol, __u64 now)
{
	if (pol->clamp_mode == CLAMP_OFF ||
	    !policy_live(pol->clamp_deadline_ns, true, now))
		return;
	bool freeze = pol->clamp_mode == CLAMP_FREEZE;
	/* a zero window is zero at any scale */
	if (!freeze && !(flow->flags & FLOW_WSCALE_KNOWN) && !adopt_handshake(flow, pkt)) {
		count(CNT_NO_WSCALE);
		return;
	}
	__u16 window = clamped_window(pkt->window, flow->wscale, pol->clamp_bytes, flow->mss, freeze);
	if (window == pkt->window) {
		count(CNT_CLAMP_NOT_NEEDED);
		return;
	}
	if (rewrite_tcp_window(skb, pkt->l4_off, pkt->window, window))
		count(CNT_REWRITE_FAILED);
	else
		count(CNT_CLAMP_APPLIED);
}

static __always_inline struct policy *current_policy(void)
{
	__u32 zero = 0;
	return bpf_map_lookup_elem(&policy_map, &zero);
}

#endif
