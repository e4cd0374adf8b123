/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The flow table: the key's hash and its two buckets, lookup and insertion of a
 * flow, and the flow a packet belongs to.
 *
 * Part of m2ho.c, which includes it after its maps and helpers.
 */
#ifndef M2HO_LIB_FLOWTABLE_H
#define M2HO_LIB_FLOWTABLE_H

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

#endif
