// Package limits holds the datapath's bounds that configuration checks
// before anything is loaded, apart from the datapath itself, so that a
// program that only reads configuration does not link the BPF objects.
package limits

// MaxFlows is the largest flow table: 16 Mi flows, a table of 6.25 GiB
// (400 bytes per flow: two slots of a 192-byte entry and its share of the
// bucket's tags), besides 112 bytes per flow for each of the flow index
// and the handshake store.
const MaxFlows = 1 << 24
