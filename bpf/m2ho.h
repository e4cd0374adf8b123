/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Every structure shared between the BPF programs and user space. Go reads
 * them through bpf2go (-type), so all fields are fixed width, naturally
 * aligned and padded explicitly: the layout is identical on every ABI.
 */
#ifndef M2HO_H
#define M2HO_H

#include <linux/types.h>

/* Default number of tracked flows; user space may override it at load. */
#define M2HO_DEFAULT_MAX_FLOWS 65536
/* The flow table is made of buckets of this many slots; a flow lives in
 * one of two buckets chosen by its hash, the less full when it is created.
 * With twice as many slots as flows, two full buckets are too rare to
 * matter even when every flow is tracked. */
#define M2HO_FLOW_BUCKET_SLOTS 8
/* Egress TSvals of one flow awaiting their echo at once. An echo frees
 * every older stamp too, so a lost segment pins none. */
#define M2HO_TS_STAMPS_PER_FLOW 4
/* RTT histogram: bucket i counts samples with floor(log2(rtt_us)) == i,
 * bucket 0 also holds 0 us and the last bucket everything above. */
#define M2HO_RTT_BUCKETS 32
#define M2HO_BURST_RINGBUF_BYTES (256 * 1024)
/* Unread burst bytes past which the producer wakes the reader: a quarter
 * of the ring, about 1600 bursts, leaves room for the bursts that finish
 * while the reader gets scheduled. */
#define M2HO_BURST_WAKEUP_BYTES (M2HO_BURST_RINGBUF_BYTES / 4)

/* Connection seen from the host: local is the modem-side host (or the LAN
 * client behind it), remote the Internet peer. IPv4 addresses are stored as
 * IPv4-mapped IPv6 (::ffff:a.b.c.d). Ports in host byte order. Aligned to
 * 8 so that the parser fills it with word stores (the layout is the same):
 * the map hashes it in 32-bit words, and a word assembled from byte stores
 * still in flight stalls the load. */
struct flow_key {
	__u8 local_addr[16];
	__u8 remote_addr[16];
	__u16 local_port;
	__u16 remote_port;
	__u32 pad;
} __attribute__((aligned(8)));

enum flow_flags {
	/* Receive window shift is known (handshake seen). */
	FLOW_WSCALE_KNOWN = 1 << 0,
	/* The host's SYN offered a window scale; waiting for the peer's
	 * SYN-ACK to learn whether scaling is in effect. */
	FLOW_WSCALE_OFFERED = 1 << 1,
	/* highest_rx_seq holds a value. */
	FLOW_RX_SEQ_VALID = 1 << 2,
	/* last_ack holds the ack number of the last ACK let through. */
	FLOW_ACK_VALID = 1 << 3,
	/* Suppression ended for this flow in the current epoch. */
	FLOW_RELEASED = 1 << 4,
	/* last_tsval holds the last TSval stamped on egress. */
	FLOW_TSVAL_VALID = 1 << 5,
	/* The peer's FIN arrived; highest_rx_seq counts it. */
	FLOW_PEER_FIN = 1 << 6,
	/* The connection ended: a RST either way, or the host acknowledged
	 * everything up to the peer's FIN. No new data will arrive. */
	FLOW_CLOSED = 1 << 7,
	/* host_syn_seq holds the sequence number of the host's SYN or
	 * SYN-ACK that began the flow. */
	FLOW_HOST_SYN = 1 << 8,
};

/*
 * What the handshake of a connection settled, keyed like the flow, for
 * flows whose own handshake the programs did not see: user space finds it
 * for connections opened before the programs were attached (socket
 * diagnostics, conntrack), and keeps it when it evicts an idle flow that
 * may yet resume. The clamp of such a flow takes its scale from here, once.
 */
struct handshake_hint {
	__u16 mss;   /* MSS the host announced; 0: unknown */
	__u8 wscale; /* shift of the host's advertised window */
	__u8 pad;
};

/*
 * ts_stamp records when an egress TSval first left, for the pping RTT
 * method. Times are CLOCK_MONOTONIC in units of 2^TS_STAMP_SHIFT ns, cut
 * to 32 bits: RTT samples need microseconds, and the difference of two
 * such times is right for 73 minutes, far longer than a stamp waits.
 */
enum ts_stamp_unit {
	TS_STAMP_SHIFT = 10,
};

struct ts_stamp {
	__u32 tsval;
	__u32 sent; /* stamp time with its lowest bit set; 0: the stamp is free */
};

/*
 * How long a flow's duplicate ACKs may be held back, counted from the ACK
 * that last moved its acknowledgement forward: DUPACK_HOLD_MS, or twice
 * the flow's smoothed RTT if that is shorter. A Linux sender's
 * retransmission timer, restarted by that ACK, runs for at least the
 * smoothed RTT plus 200 ms (TCP_RTO_MIN), so a hold below 200 ms never
 * lets it expire while a hole waits for data the cells are still
 * delivering. Past the hold the duplicates go out and a real loss is
 * repaired by fast retransmit. A sender whose window is full sends nothing
 * more to draw duplicates from the receiver but its tail loss probe, two
 * smoothed RTTs after the last ACK it got: the probe's duplicate arrives
 * after a hold of at most two RTTs, so it goes out, and the sender repairs
 * the loss from it instead of waiting for its timer.
 */
enum dupack_hold {
	DUPACK_HOLD_MS = 150,
};

/*
 * A flow's state, laid out by which direction writes it. An entry (key and
 * state) spans three cache lines, and the two directions of one flow often
 * run on two CPUs at once. The key's line holds what both directions read
 * on every packet and write rarely; each direction then writes its own
 * line only, so no packet takes a line back from the other CPU.
 */
struct flow_state {
	/* with the key: read by every packet, written rarely */
	__u64 last_seen_ns;    /* CLOCK_MONOTONIC, any direction; refreshed once a millisecond */
	__u32 flags;           /* enum flow_flags; each bit is set once */
	__u32 epoch;           /* suppression epoch the snapshot belongs to */
	__u32 snapshot_rx_seq; /* highest_rx_seq when this flow entered `epoch` */
	__u16 mss;             /* MSS the host announced in its SYN */
	__u8 wscale;           /* shift of the host's advertised window */
	__u8 pad;
	/* written by ingress */
	__u64 first_seen_ns;   /* CLOCK_MONOTONIC */
	__u64 rx_bytes;        /* ingress TCP payload bytes */
	__u64 rx_packets;      /* ingress TCP segments */
	__u64 rtt_latest_ns;
	__u64 rtt_min_ns;
	__u64 srtt_ns;         /* EWMA with gain 1/8, as RFC 6298 */
	__u64 rtt_samples;
	__u32 highest_rx_seq;  /* end (seq + payload) of the highest segment received */
	__u32 last_tsecr;      /* last TSecr looked up on ingress (0: none) */
	/* written by egress (and a stamp freed by ingress once per echo) */
	__u32 last_ack;        /* ack number of the last egress ACK let through */
	__u32 last_tsval;      /* last TSval stamped on egress */
	__u32 host_syn_seq;    /* see FLOW_HOST_SYN */
	/* when the ACK that moved last_ack forward left, in ts_stamp units
	 * with the lowest bit set; 0 before the first ACK */
	__u32 ack_moved;
	/* when the first duplicate of last_ack with data above it (a hole)
	 * left or was held, in the same units; 0 while there was none */
	__u32 hole_seen;
	/* TSvals awaiting their echo; a TSval that finds none free goes
	 * unstamped, so a flow yields up to this many samples per RTT */
	struct ts_stamp stamps[M2HO_TS_STAMPS_PER_FLOW];
	__u8 pad_egress[12];
};

/* Values of a flow bucket's tag besides the live tags. */
enum flow_tag {
	FLOW_TAG_FREE = 0,
	/* taken by a CPU that is filling the slot in */
	FLOW_TAG_CLAIMED = 1,
	/* evicted by user space, which frees the slot once every program run
	 * that may have found the flow before has ended: a packet still
	 * writing into the old flow must not land in the next one */
	FLOW_TAG_DEAD = 2,
	/* live tags are the flow's hash, moved out of the values above */
	FLOW_TAG_LIVE_MIN = 3,
};

struct flow_entry {
	struct flow_key key;
	struct flow_state state;
};

#define M2HO_CACHE_LINE 64
_Static_assert(sizeof(struct flow_entry) == 3 * M2HO_CACHE_LINE, "a flow entry is three cache lines");
_Static_assert(__builtin_offsetof(struct flow_entry, state.first_seen_ns) == M2HO_CACHE_LINE,
	       "ingress's fields start the second line");
_Static_assert(__builtin_offsetof(struct flow_entry, state.last_ack) == 2 * M2HO_CACHE_LINE,
	       "egress's fields start the third line");

/*
 * One bucket of the flow table, an open hash table over an array map: the
 * packet path finds a flow with inlined array lookups and its own hash, no
 * helper call. The tags share one cache line, so a lookup reads a single
 * line per bucket besides its own entry. A flow's slot number is bucket *
 * M2HO_FLOW_BUCKET_SLOTS + position. The flow index (a hash map from key
 * to slot number) makes creation atomic and lets user space list flows.
 */
struct flow_bucket {
	__u32 tags[M2HO_FLOW_BUCKET_SLOTS]; /* enum flow_tag or a live tag */
	__u32 pad[16 - M2HO_FLOW_BUCKET_SLOTS];
	struct flow_entry entries[M2HO_FLOW_BUCKET_SLOTS];
};

/* Map values of an mmapable array start page-aligned, so a bucket made of
 * whole lines keeps every entry on its own three. */
_Static_assert(sizeof(struct flow_bucket) % M2HO_CACHE_LINE == 0, "buckets are whole cache lines");

/* RTT histogram of one CPU, in one per-CPU map value so that user space
 * reads every bucket with a single lookup. */
struct rtt_histogram {
	__u64 buckets[M2HO_RTT_BUCKETS];
};

enum clamp_mode {
	CLAMP_OFF = 0,
	/* advertise min(own, clamp_bytes), never below one MSS */
	CLAMP_BYTES = 1,
	/* advertise a zero window (Freeze-TCP baseline) */
	CLAMP_FREEZE = 2,
};

/*
 * Duplicate-ACK suppression. The source cell's context release delivers
 * data out of order the moment the UE applies the handover command, before
 * user space can learn of the command through the modem's diagnostics, and
 * while the data the source sent before it still arrives in order: so
 * suppression starts at the prediction (or the command) holding only
 * duplicates of a hole, and turns into the handover's epoch at the
 * execution, when the release's hole lies below every flow's snapshot.
 */
enum suppress_mode {
	SUPPRESS_OFF = 0,
	/* from the execution: each flow snapshots its highest received
	 * sequence in the epoch and is released by its own ACK reaching it */
	SUPPRESS_HANDOVER = 1,
	/* from the prediction to the execution: no snapshot, a duplicate is
	 * held only while data above its acknowledgement has arrived */
	SUPPRESS_PREPARATION = 2,
};

/*
 * Policy written by user space, read by every packet. Deadlines are
 * CLOCK_MONOTONIC ns; a policy past its deadline is ignored by the BPF code
 * itself so a dead daemon cannot keep clamping or suppressing. A zero
 * deadline belongs to a part user space has cleared.
 */
struct policy {
	__u64 clamp_deadline_ns;
	__u64 suppress_deadline_ns;
	/* When SUPPRESS_PREPARATION began: a hole whose first duplicate
	 * left before it (a loss the sender is already repairing) is not the
	 * handover's, and is not held. */
	__u64 suppress_since_ns;
	__u32 clamp_mode;      /* enum clamp_mode */
	__u32 clamp_bytes;
	__u32 suppress_mode;   /* enum suppress_mode */
	__u32 epoch;           /* bumped by user space at every handover */
};

/*
 * The deadline of each policy part whose expiry was last counted, written
 * by the BPF code only: the first packet past a deadline moves it there
 * and counts the expiry, so each deadline counts once, whatever user space
 * writes to the policy meanwhile.
 */
struct policy_expiry {
	__u64 clamp_deadline_ns;
	__u64 suppress_deadline_ns;
};

/* Downlink burst in progress, one per interface. Packets add to their own
 * CPU's cumulative ingress counters; the burst's bytes and packets are the
 * growth of those counters summed over every CPU, taken once per burst. So
 * the per-packet path writes no shared cache line except to refresh
 * seen_ns, a few times per burst gap. */
struct burst_state {
	__u64 start_ns;      /* first packet of the burst */
	/* A recent packet's time, at most the refresh interval behind the
	 * latest packet on any CPU; 0 before the first packet. */
	__u64 seen_ns;
	__u64 start_bytes;   /* every CPU's CNT_INGRESS_BYTES summed when the burst began */
	__u64 start_packets; /* the same for CNT_INGRESS_PACKETS */
};

/* A finished downlink burst, emitted to the ring buffer. */
struct burst_event {
	__u64 start_ns; /* first packet, CLOCK_MONOTONIC */
	__u64 end_ns;   /* last packet, CLOCK_MONOTONIC */
	__u64 bytes;    /* IP bytes of all packets (every protocol) */
	__u64 packets;
};

/* Index into struct cpu_state's counters. Append only: user space maps the
 * indices to names. */
enum counter_id {
	CNT_EGRESS_PACKETS,
	CNT_INGRESS_PACKETS,
	/* IP bytes of every ingress packet (a sum, not a count), next to the
	 * packet count: every ingress packet adds to both in one cache line */
	CNT_INGRESS_BYTES,
	CNT_NOT_IP,            /* neither IPv4 nor IPv6: passed */
	CNT_NOT_TCP,           /* IP but not TCP: passed */
	CNT_MALFORMED,         /* truncated or inconsistent headers: passed */
	CNT_FRAGMENT,          /* IP fragment: passed */
	CNT_FLOW_CREATED,
	CNT_MAP_FULL,          /* flows map full, flow left untracked */
	CNT_UNTRACKED,         /* segment of a flow not in the map: passed */
	CNT_NO_WSCALE,         /* clamp skipped: handshake not seen */
	CNT_CLAMP_APPLIED,     /* window rewritten */
	CNT_CLAMP_NOT_NEEDED,  /* own window already within the clamp */
	CNT_REWRITE_FAILED,    /* checksum or store helper failed: passed */
	CNT_DUPACK_SUPPRESSED, /* duplicate ACK dropped */
	CNT_FLOW_RELEASED,     /* flow left suppression by its own ACK */
	CNT_CLAMP_EXPIRED,     /* clamp policy passed its deadline */
	CNT_SUPPRESS_EXPIRED,  /* suppression passed its deadline */
	CNT_SNAPSHOTS,         /* per-flow epoch snapshots taken */
	CNT_TS_STAMPED,        /* egress TSvals recorded */
	CNT_TS_UNSTAMPED,      /* new egress TSvals left unstamped: every stamp of the flow awaits its echo */
	CNT_RTT_SAMPLES,       /* ingress TSecr matched */
	CNT_BURSTS,            /* bursts emitted */
	CNT_BURST_LOST,        /* ring buffer full: burst dropped */
	CNT_FLOW_CLOSED,       /* connection ended: RST, or the peer's FIN acknowledged */
	CNT_WSCALE_ADOPTED,    /* window scale taken from a handshake hint */
	/* ingress segment further from the flow's highest sequence than the
	 * host's largest window: left out of the flow's sequence and close */
	CNT_SEQ_IMPLAUSIBLE,
	/* duplicate ACK let through although suppression held its flow: its
	 * acknowledgement stood still for DUPACK_HOLD_MS */
	CNT_DUPACK_HOLD_EXPIRED,
	/* ACK moving the acknowledgement to a hole suppression holds: its
	 * SACK option left as NOPs */
	CNT_SACK_HIDDEN,
	CNT_MAX,
};

/*
 * Everything the programs keep for one CPU, in one per-CPU map value: a
 * packet looks up its CPU's share once, and the fields every packet reads
 * or writes (the clocks and the packet counts, the first six words) lie
 * together, in at most two cache lines. User space reads every counter
 * with a single lookup.
 */
struct cpu_state {
	/* This CPU's copy of the coarse clock, read again only when jiffies
	 * moves: the two advance together at each tick. */
	__u64 clock_jiffies;
	__u64 clock_ns;      /* CLOCK_MONOTONIC, coarse; 0 before the first read */
	__u64 burst_last_ns; /* this CPU's latest downlink packet, CLOCK_MONOTONIC; 0 before its first */
	__u64 counters[CNT_MAX];
};

_Static_assert(__builtin_offsetof(struct cpu_state, counters[CNT_INGRESS_BYTES]) < 6 * sizeof(__u64),
	       "the counters every packet updates follow the clocks");

#endif /* M2HO_H */
