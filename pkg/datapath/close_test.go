package datapath

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// step is one segment of a connection's end, and whether the flow is
// closed after it.
type step struct {
	seg    segment
	egress bool
	closed bool
}

func withFlags(s segment, fin, rst bool) segment {
	s.fin, s.rst = fin, rst
	return s
}

// TestFlowClosed runs the ways a connection ends through the programs: a
// flow is closed by a RST either way, or once the host acknowledges the
// peer's FIN, and never by the host's own FIN. A SYN opens it again.
func TestFlowClosed(t *testing.T) {
	tests := []struct {
		name  string
		steps func(s segment) []step
	}{
		{"peer's RST", func(s segment) []step {
			return []step{{withFlags(peerData(s, 1000, 0), false, true), false, true}}
		}},
		{"host's RST", func(s segment) []step {
			return []step{{withFlags(ackOf(s, 1000), false, true), true, true}}
		}},
		{"RST both ways", func(s segment) []step {
			return []step{
				{withFlags(ackOf(s, 1000), false, true), true, true},
				{withFlags(peerData(s, 1000, 0), false, true), false, true},
			}
		}},
		{"peer's FIN, then the host's ACK of it", func(s segment) []step {
			return []step{
				{withFlags(peerData(s, 1000, 500), true, false), false, false},
				{ackOf(s, 1500), true, false},
				{ackOf(s, 1501), true, true},
			}
		}},
		{"peer's FIN above a hole", func(s segment) []step {
			return []step{
				{withFlags(peerData(s, 2000, 500), true, false), false, false},
				{ackOf(s, 1000), true, false},
				{peerData(s, 1000, 1000), false, false},
				{ackOf(s, 2501), true, true},
			}
		}},
		{"host's FIN only", func(s segment) []step {
			return []step{
				{withFlags(ackOf(s, 1000), true, false), true, false},
				{peerData(s, 1000, 0), false, false},
			}
		}},
	}
	for _, f := range framings {
		t.Run(f.name, func(t *testing.T) {
			d := datapathFor(t, f)
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					s := freshPorts(segment{ipv6: f.ipv6, ethernet: f.ethernet, vlans: f.vlans})
					handshake(t, d, s, 7, 7)
					verdictOf(t, d, peerData(s, 0, 1000), false)
					verdictOf(t, d, ackOf(s, 1000), true)
					before, err := d.Counters()
					require.NoError(t, err)

					closedAt := -1
					for i, st := range tt.steps(s) {
						assert.Equal(t, int32(verdictPass), verdictOf(t, d, st.seg, st.egress), "step %d passes", i)
						assert.Equal(t, st.closed, flowOf(t, d, s).Closed, "closed after step %d", i)
						if st.closed && closedAt < 0 {
							closedAt = i
						}
					}
					after, err := d.Counters()
					require.NoError(t, err)
					wantCloses := uint64(0)
					if closedAt >= 0 {
						wantCloses = 1
					}
					assert.Equal(t, wantCloses, after[m2hoCounterIdCNT_FLOW_CLOSED]-before[m2hoCounterIdCNT_FLOW_CLOSED], "each end counts once")

					// the same ports open a new connection, from another
					// initial sequence number
					verdictOf(t, d, hostSYN(s, hostISN+1<<20, 7), true)
					assert.False(t, flowOf(t, d, s).Closed, "a SYN opens the flow again")
				})
			}
		})
	}
}

// flowOf is the tracked flow of fixture segment s.
func flowOf(t *testing.T, d *Datapath, s segment) Flow {
	t.Helper()
	f, ok, err := trackedFlow(d, func(f Flow) bool {
		return f.Local.Port() == s.localPort && f.Remote.Port() == s.remotePort
	})
	require.NoError(t, err)
	require.True(t, ok, "no flow tracked for ports %d-%d", s.localPort, s.remotePort)
	return f
}
