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

/* flow_hash mixes the key's 64-bit words with the seed (multiply and
 * xor-shift per word); the flow table needs no more than a good spread.
 * The two halves choose the flow's two buckets. */
static __always_inline __u64 flow_hash(const struct flow_key *key)
{
	const __u64 *word = (const __u64 *)key;
	/* Hidden from the compiler, the key is read as the words the parser
	 * stored: left to it, it may rebuild each word from the parser's
	 * 32-bit halves in registers, which spills and costs more. */
	asm volatile("" : "+r"(word));
	__u64 h = cfg_flow_hash_seed;
#pragma unroll
	for (int i = 0; i < sizeof(*key) / sizeof(__u64); i++) {
		h = (h ^ word[i]) * 0x9e3779b97f4a7c15ULL;
		h ^= h >> 29;
	}
	return h;
}

static __always_inline bool flow_key_equal(const struct flow_key *a, const struct flow_key *b)
{
	const __u64 *x = (const __u64 *)a, *y = (const __u64 *)b;
	return x[0] == y[0] && x[1] == y[1] && x[2] == y[2] && x[3] == y[3] && x[4] == y[4];
}

/* flow_bucket_index returns the index of the flow's bucket `which` (0 or 1). */
static __always_inline __u32 flow_bucket_index(__u64 hash, int which)
{
	return (which ? hash >> 32 : hash) & cfg_flow_bucket_mask;
}

static __always_inline struct flow_bucket *flow_bucket(__u64 hash, int which)
{
	__u32 index = flow_bucket_index(hash, which);
	return bpf_map_lookup_elem(&flow_table, &index);
}

static __always_inline __u32 flow_tag(__u64 hash)
{
	__u32 tag = hash;
	return tag < FLOW_TAG_LIVE_MIN ? tag + FLOW_TAG_LIVE_MIN : tag;
}

/* slot_holds says whether the slot at position of bucket holds key, whose
 * tag is tag. */
static __always_inline bool slot_holds(const struct flow_bucket *bucket, __u32 position, const struct flow_key *key,
				       __u32 tag)
{
	return bucket->tags[position] == tag && flow_key_equal(&bucket->entries[position].key, key);
}

/* Two 32-bit tags per 64-bit word: the value 1 in each half, and the top
 * bit of each half. */
#define TAG_PAIR_ONES 0x0000000100000001ULL
#define TAG_PAIR_TOPS 0x8000000080000000ULL

/* tag_pair_may_match tells whether either tag of a word of two may equal
 * the tag that pattern holds in both halves: a half of word ^ pattern is
 * zero exactly where the tags match, and (x - ones) & ~x & tops finds a
 * zero half. It never misses one; a borrow out of a matching low half
 * can flag the high half too, which costs only a tag compare. */
static __always_inline bool tag_pair_may_match(__u64 word, __u64 pattern)
{
	__u64 x = word ^ pattern;
	return (x - TAG_PAIR_ONES) & ~x & TAG_PAIR_TOPS;
}

/* find_in_bucket returns the live entry of key in bucket. It tests the
 * tags two at a time and compares single tags only in a pair that may
 * match, so that a flow costs about the same at any slot, and a bucket
 * without the flow costs four tests. */
static __always_inline struct flow_entry *find_in_bucket(struct flow_bucket *bucket, const struct flow_key *key,
							 __u32 tag)
{
	const __u64 *pairs = (const __u64 *)bucket->tags;
	__u64 pattern = tag * TAG_PAIR_ONES;
#pragma unroll
	for (int pair = 0; pair < M2HO_FLOW_BUCKET_SLOTS / 2; pair++) {
		if (!tag_pair_may_match(pairs[pair], pattern))
			continue;
#pragma unroll
		for (int i = 2 * pair; i < 2 * pair + 2; i++) {
			if (slot_holds(bucket, i, key, tag))
				return &bucket->entries[i];
		}
	}
	return NULL;
}

/* find_flow returns the live entry of key: every slot of both buckets is
 * looked at, since evicted flows leave free slots anywhere. */
static __always_inline struct flow_entry *find_flow(const struct flow_key *key, __u64 hash)
{
	__u32 tag = flow_tag(hash);
	for (int which = 0; which < 2; which++) {
		struct flow_bucket *bucket = flow_bucket(hash, which);
		if (!bucket)
			return NULL;
		struct flow_entry *entry = find_in_bucket(bucket, key, tag);
		if (entry)
			return entry;
	}
	return NULL;
}

static __always_inline void reset_flow(struct flow_state *flow, __u64 now)
{
	__builtin_memset(flow, 0, sizeof(*flow));
	flow->first_seen_ns = now;
	flow->last_seen_ns = now;
}

/* free_slots counts a bucket's free slots without a branch per slot: a
 * branch would split the verifier's states at every slot, 2^16 for the
 * two buckets. (tag - 1) >> 63 in 64 bits is 1 for a zero tag only. */
static __always_inline __u64 free_slots(const struct flow_bucket *bucket)
{
	_Static_assert(FLOW_TAG_FREE == 0, "free tags are zero");
	__u64 free = 0;
	for (__u32 i = 0; i < M2HO_FLOW_BUCKET_SLOTS; i++)
		free += ((__u64)bucket->tags[i] - 1) >> 63;
	return free;
}

/* index_entry returns the entry a flow index value names, if it is live
 * and holds key. */
static __always_inline struct flow_entry *index_entry(__u32 slot, const struct flow_key *key, __u32 tag)
{
	__u32 index = slot / M2HO_FLOW_BUCKET_SLOTS, position = slot % M2HO_FLOW_BUCKET_SLOTS;
	struct flow_bucket *bucket = bpf_map_lookup_elem(&flow_table, &index);
	if (!bucket || !slot_holds(bucket, position, key, tag))
		return NULL;
	return &bucket->entries[position];
}

/*
 * create_flow claims a free slot in the less full of key's two buckets and
 * enters it in the flow index, whose exclusive insert settles a race
 * between two CPUs creating the same flow: the loser frees its slot and
 * takes the winner's, once that one is live. NULL (counted) when the index
 * or both buckets are full.
 */
static __always_inline struct flow_entry *create_flow(const struct flow_key *key, __u64 hash, __u64 now)
{
	__u32 tag = flow_tag(hash);
	__u32 first = flow_bucket_index(hash, 0), second = flow_bucket_index(hash, 1);
	struct flow_bucket *a = flow_bucket(hash, 0), *b = flow_bucket(hash, 1);
	if (!a || !b)
		return NULL;
	/* Only the indices are swapped, and the loop looks the bucket up
	 * again: choosing between two map value pointers splits the
	 * verifier's states the way per-slot branches do. */
	if (free_slots(b) > free_slots(a)) {
		__u32 swap = first;
		first = second;
		second = swap;
	}
	for (int which = 0; which < 2; which++) {
		__u32 bucket_index = which ? second : first;
		struct flow_bucket *bucket = bpf_map_lookup_elem(&flow_table, &bucket_index);
		if (!bucket)
			break;
		for (__u32 i = 0; i < M2HO_FLOW_BUCKET_SLOTS; i++) {
			if (bucket->tags[i] != FLOW_TAG_FREE ||
			    __sync_val_compare_and_swap(&bucket->tags[i], FLOW_TAG_FREE, FLOW_TAG_CLAIMED) != FLOW_TAG_FREE)
				continue;
			__u32 slot = bucket_index * M2HO_FLOW_BUCKET_SLOTS + i;
			long err = bpf_map_update_elem(&flow_index, key, &slot, BPF_NOEXIST);
			if (err) {
				__sync_lock_test_and_set(&bucket->tags[i], FLOW_TAG_FREE);
				if (err != -EEXIST) {
					count(CNT_MAP_FULL);
					return NULL;
				}
				__u32 *theirs = bpf_map_lookup_elem(&flow_index, key);
				return theirs ? index_entry(*theirs, key, tag) : NULL;
			}
			struct flow_entry *entry = &bucket->entries[i];
			entry->key = *key;
			reset_flow(&entry->state, now);
			/* a full barrier: the entry is visible before its tag */
			__sync_lock_test_and_set(&bucket->tags[i], tag);
			count(CNT_FLOW_CREATED);
			return entry;
		}
	}
	count(CNT_MAP_FULL);
	return NULL;
}

/*
 * repeats_host_syn says whether pkt, a SYN the host sends, is a copy of
 * the one that began flow, still open: a retransmission, whose sequence
 * number is the same. The host may retransmit after the peer's answer
 * passed the hook, should the stack drop that answer, and the peer may
 * then answer with a bare ACK that teaches the scale no more. A connection
 * that ended retransmits nothing: a SYN on its ports opens another.
 */
static __always_inline bool repeats_host_syn(const struct flow_state *flow, const struct packet *pkt)
{
	return (flow->flags & (FLOW_HOST_SYN | FLOW_CLOSED)) == FLOW_HOST_SYN && flow->host_syn_seq == pkt->seq;
}

/*
 * lookup_flow returns the flow of pkt. Only the host's segments create
 * flows, and not a RST (which ends a connection): were the peer's to do
 * so, anyone on the Internet could fill the table with bare segments from
 * ports of their choosing, and every later connection would go untracked.
 * A SYN the host sends, other than a copy of the flow's own, starts a
 * connection afresh: it resets the state an earlier connection with the
 * same ports left, and drops that one's stored handshake, which must never
 * reach this connection (its flow may yet be created from a later segment,
 * should the table be full at the SYN).
 */
static __always_inline struct flow_state *lookup_flow(const struct packet *pkt, __u64 now, bool egress)
{
	bool opens = egress && (pkt->tcp_flags & TCPF_SYN);
	if (opens)
		bpf_map_delete_elem(&handshake_hints, &pkt->key);
	__u64 hash = flow_hash(&pkt->key);
	struct flow_entry *entry = find_flow(&pkt->key, hash);
	if (entry) {
		if (opens && !repeats_host_syn(&entry->state, pkt))
			reset_flow(&entry->state, now);
		return &entry->state;
	}
	if (!egress || (pkt->tcp_flags & TCPF_RST))
		return NULL;
	entry = create_flow(&pkt->key, hash, now);
	return entry ? &entry->state : NULL;
}

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

/* stamp_time is the clock in the units and width of struct ts_stamp, never
 * zero (the free mark). */
static __always_inline __u32 stamp_time(__u64 now)
{
	return (__u32)(now >> TS_STAMP_SHIFT) | 1;
}

/*
 * suppress_dupack decides whether an egress ACK is a duplicate to drop. The
 * window is not compared, although RFC 5681 counts a window update as no
 * duplicate: during a hole, such an ACK carries the same SACK blocks as the
 * duplicates around it, and SACK-based loss detection (RACK) at the sender
 * would mark the hole lost from them alone.
 */
static __always_inline bool suppress_dupack(struct flow_state *flow, const struct packet *pkt,
					    struct policy *pol, __u64 now)
{
	if (!pol->suppress_active ||
	    !policy_live(pol->suppress_deadline_ns, false, now))
		return false;
	if (flow->flags & FLOW_RELEASED)
		return false;
	/* Everything received before the handover is acknowledged, and
	 * either more besides, or nothing arrived above it. An ACK that
	 * only reaches the snapshot while data above it waits is the hole
	 * of a context release that began after the snapshot: the epoch
	 * starts at the handover command, and the source cell may release
	 * the data behind the hole just after it. */
	__u32 snapshot = flow->snapshot_rx_seq;
	if (seq_after(pkt->ack, snapshot) ||
	    (pkt->ack == snapshot && seq_after_eq(pkt->ack, READ_ONCE(flow->highest_rx_seq)))) {
		flow_set(flow, FLOW_RELEASED);
		count(CNT_FLOW_RELEASED);
		return false;
	}
	bool pure = pkt->payload_len == 0 && !(pkt->tcp_flags & (TCPF_SYN | TCPF_FIN | TCPF_RST));
	if (!pure || !(flow->flags & FLOW_ACK_VALID) || pkt->ack != flow->last_ack)
		return false;
	/* The hold counts from the ACK that last moved the acknowledgement,
	 * which restarted the sender's retransmission timer: a hole from
	 * the handover command on is held through execution and Smoothing,
	 * one epoch after the other, and never long enough for that timer. */
	__s64 hold = (__s64)DUPACK_HOLD_MS * 1000000;
	__u64 srtt = READ_ONCE(flow->srtt_ns);
	if (srtt && (__s64)(2 * srtt) < hold)
		hold = 2 * srtt;
	__s32 held = stamp_time(now) - flow->ack_moved;
	if ((__s64)held << TS_STAMP_SHIFT >= hold) {
		count(CNT_DUPACK_HOLD_EXPIRED);
		return false;
	}
	return true;
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

static __always_inline struct policy *current_policy(void)
{
	__u32 zero = 0;
	return bpf_map_lookup_elem(&policy_map, &zero);
}

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
	if (pol && ((pol->suppress_active && now <= pol->suppress_deadline_ns) ||
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
	if (plain_ack && suppress_dupack(flow, &pkt, pol, now)) {
		count(CNT_DUPACK_SUPPRESSED);
		return TC_ACT_SHOT;
	}
	/* after the drop: the peer never echoes the TSval of a dropped ACK */
	stamp_tsval(flow, &pkt);
	if (!plain_ack)
		return TC_ACT_UNSPEC;
	if (!(flow->flags & FLOW_ACK_VALID) || pkt.ack != flow->last_ack)
		flow->ack_moved = stamp_time(now);
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
