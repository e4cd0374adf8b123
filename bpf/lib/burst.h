/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Downlink bursts: bytes per packet train, per CPU, merged across CPUs when a
 * gap ends the train, reported through the ring buffer.
 *
 * Part of m2ho.c, which includes it after its maps and helpers.
 */
#ifndef M2HO_LIB_BURST_H
#define M2HO_LIB_BURST_H

/*
 * burst_wakeup picks the ring buffer notification for a finished burst.
 * User space drains the ring at its sampling pace, so a wake-up per burst
 * (up to hundreds a second) buys nothing while the link is steady. It is
 * woken at once only while a policy is in force, when Smoothing waits for
 * the end of the first burst, and when the ring fills up, so that no burst
 * is lost between two drains. Expiry is left to the packet paths to count.
 */
static __always_inline __u64 burst_wakeup(__u64 now)
{
	struct policy *pol = current_policy();
	if (pol && ((pol->suppress_mode != SUPPRESS_OFF && now <= pol->suppress_deadline_ns) ||
		    (pol->clamp_mode != CLAMP_OFF && now <= pol->clamp_deadline_ns)))
		return BPF_RB_FORCE_WAKEUP;
	if (bpf_ringbuf_query(&bursts, BPF_RB_AVAIL_DATA) >= M2HO_BURST_WAKEUP_BYTES)
		return BPF_RB_FORCE_WAKEUP;
	return BPF_RB_NO_WAKEUP;
}

/* Every CPU's ingress clock and counters, gathered at a burst boundary. */
struct burst_scan {
	__u64 last_ns; /* latest packet on any CPU, the current one's excluded */
	__u64 bytes;
	__u64 packets;
	__u32 this_cpu;
};

static long scan_cpu(__u64 index, void *ctx)
{
	struct burst_scan *scan = ctx;
	__u32 cpu = index, zero = 0;
	if (cpu >= cfg_nr_cpus)
		return 1;
	struct cpu_state *state = bpf_map_lookup_percpu_elem(&cpu_state_map, &zero, cpu);
	if (!state)
		return 0;
	scan->bytes += state->counters[CNT_INGRESS_BYTES];
	scan->packets += state->counters[CNT_INGRESS_PACKETS];
	if (cpu != scan->this_cpu && (__s64)(state->burst_last_ns - scan->last_ns) > 0)
		scan->last_ns = state->burst_last_ns;
	return 0;
}

/*
 * account_burst adds an ingress packet, already counted in the counters
 * of cpu, its CPU's state, to the current downlink burst. The packet that
 * arrives more than the idle gap after the latest one on any CPU ends the
 * burst: it emits the finished one, once, and starts the next. The common
 * case only reads the shared state. Packets on other CPUs racing with the
 * boundary land in either burst: a few bytes at the boundary, no loss and
 * no double count, since each burst is the difference of two sums of
 * cumulative counters.
 */
static __always_inline void account_burst(struct cpu_state *cpu, __u64 now, __u64 bytes)
{
	/* seen_ns lags the latest packet by at most a quarter gap */
	const __u64 refresh_ns = cfg_burst_gap_ns / 4;
	__u32 zero = 0;
	struct burst_state *state = bpf_map_lookup_elem(&burst_map, &zero);
	if (!state)
		return;
	__u64 seen = state->seen_ns;
	__s64 idle = now - seen;
	if (seen && idle <= (__s64)refresh_ns)
		goto out;
	if (seen && idle <= (__s64)cfg_burst_gap_ns) {
		state->seen_ns = now;
		goto out;
	}
	/* a first packet, or a possible gap that seen_ns alone cannot tell */
	struct burst_scan scan = {.last_ns = cpu->burst_last_ns, .this_cpu = bpf_get_smp_processor_id()};
	bpf_loop(M2HO_MAX_CPUS, scan_cpu, &scan, 0);
	if (seen && scan.last_ns && (__s64)(now - scan.last_ns) <= (__s64)cfg_burst_gap_ns) {
		state->seen_ns = now;
		goto out;
	}
	/* the CPU that moves seen_ns on owns the boundary */
	if (__sync_val_compare_and_swap(&state->seen_ns, seen, now) != seen)
		goto out;
	__u64 bytes_before = scan.bytes - bytes;
	__u64 packets_before = scan.packets - 1;
	if (seen) {
		struct burst_event finished = {
			.start_ns = state->start_ns,
			.end_ns = scan.last_ns,
			.bytes = bytes_before - state->start_bytes,
			.packets = packets_before - state->start_packets,
		};
		if (bpf_ringbuf_output(&bursts, &finished, sizeof(finished), burst_wakeup(now)))
			count(CNT_BURST_LOST);
		else
			count(CNT_BURSTS);
	}
	state->start_ns = now;
	state->start_bytes = bytes_before;
	state->start_packets = packets_before;
out:
	cpu->burst_last_ns = now;
}

#endif
