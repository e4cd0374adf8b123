/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * RTT from TCP timestamps: egress TSvals stamped with their send time, matched
 * with the TSecr that echoes them, into the log2 histogram.
 *
 * Part of m2ho.c, which includes it after its maps and helpers.
 */
#ifndef M2HO_LIB_RTT_H
#define M2HO_LIB_RTT_H

/* stamp_time is the clock in the units and width of struct ts_stamp, never
 * zero (the free mark). */
static __always_inline __u32 stamp_time(__u64 now)
{
	return (__u32)(now >> TS_STAMP_SHIFT) | 1;
}

/*
 * stamp_tsval records when a TSval first left, for the pping RTT method: a
 * TSval repeated by later segments is not stamped again, since its echo
 * cannot tell which of them the peer answered. The stamps live in the flow,
 * so neither stamping nor matching calls a map helper. The sent time is the
 * free mark: egress writes it after the TSval, ingress reads it before the
 * TSval, both with fully ordered atomics (once per new TSval or TSecr, not
 * per packet), so that weakly ordered CPUs never pair a time with another
 * stamp's TSval. Two CPUs sending on one flow at once may take the same
 * free stamp, which costs one sample.
 */
static __always_inline void stamp_tsval(struct flow_state *flow, const struct packet *pkt)
{
	if (!pkt->opts.has_timestamps)
		return;
	if ((flow->flags & FLOW_TSVAL_VALID) && flow->last_tsval == pkt->opts.tsval)
		return;
	flow->last_tsval = pkt->opts.tsval;
	flow_set(flow, FLOW_TSVAL_VALID);
	for (int i = 0; i < M2HO_TS_STAMPS_PER_FLOW; i++) {
		struct ts_stamp *stamp = &flow->stamps[i];
		if (READ_ONCE(stamp->sent))
			continue;
		stamp->tsval = pkt->opts.tsval;
		/* an exchange is a full barrier: the TSval is visible first */
		__sync_lock_test_and_set(&stamp->sent, stamp_time(bpf_ktime_get_ns()));
		count(CNT_TS_STAMPED);
		return;
	}
	count(CNT_TS_UNSTAMPED);
}

static __always_inline __u32 log2_bucket(__u64 value)
{
	__u32 bucket = 0;
#pragma unroll
	for (int shift = 16; shift > 0; shift >>= 1) {
		if (value >= (1ULL << shift)) {
			value >>= shift;
			bucket += shift;
		}
	}
	return bucket < M2HO_RTT_BUCKETS ? bucket : M2HO_RTT_BUCKETS - 1;
}

/*
 * match_tsecr takes an RTT sample when an ingress TSecr echoes a stamped
 * TSval. The peer echoes the newest TSval it has accepted, so stamps of
 * TSvals before the TSecr will never be echoed: they are freed too.
 */
static __always_inline void match_tsecr(struct flow_state *flow, const struct packet *pkt, __u64 now)
{
	__u32 tsecr = pkt->opts.tsecr;
	if (!pkt->opts.has_timestamps || !(pkt->tcp_flags & TCPF_ACK) || tsecr == 0)
		return;
	/* Segments of a train echo the same TSecr; only the first can match,
	 * since a match frees the stamp. */
	if (tsecr == flow->last_tsecr)
		return;
	flow->last_tsecr = tsecr;
	__u32 sent = 0;
	for (int i = 0; i < M2HO_TS_STAMPS_PER_FLOW; i++) {
		struct ts_stamp *stamp = &flow->stamps[i];
		if (!READ_ONCE(stamp->sent))
			continue;
		/* an atomic read orders the TSval read after it */
		__u32 stamp_sent = __sync_fetch_and_or(&stamp->sent, 0);
		if (!stamp_sent || seq_after(stamp->tsval, tsecr))
			continue;
		if (stamp->tsval == tsecr)
			sent = stamp_sent;
		WRITE_ONCE(stamp->sent, 0);
	}
	if (!sent)
		return;
	__s32 elapsed = stamp_time(now) - sent;
	__u64 rtt = elapsed > 0 ? (__u64)elapsed << TS_STAMP_SHIFT : 0;

	flow->rtt_latest_ns = rtt;
	if (!flow->rtt_samples || rtt < flow->rtt_min_ns)
		flow->rtt_min_ns = rtt;
	if (!flow->rtt_samples)
		flow->srtt_ns = rtt;
	else
		flow->srtt_ns = flow->srtt_ns - (flow->srtt_ns >> 3) + (rtt >> 3);
	flow->rtt_samples++;
	count(CNT_RTT_SAMPLES);

	__u32 zero = 0;
	struct rtt_histogram *hist = bpf_map_lookup_elem(&rtt_hist, &zero);
	if (hist)
		hist->buckets[log2_bucket(rtt / 1000)] += 1;
}

#endif
