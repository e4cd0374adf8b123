package datapath

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var (
	nopOption = layers.TCPOption{OptionType: layers.TCPOptionKindNop}
	// sackOption is one SACK block, its edges arbitrary.
	sackOption = layers.TCPOption{OptionType: layers.TCPOptionKindSACK, OptionLength: 10,
		OptionData: binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(nil, 7000), 8000)}
)

func timestampOption(tsval, tsecr uint32) layers.TCPOption {
	return layers.TCPOption{OptionType: layers.TCPOptionKindTimestamps, OptionLength: 10,
		OptionData: binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(nil, tsval), tsecr)}
}

// TestTimestampsInEveryOptionLayout checks that the TSval stamp and its
// echo are found wherever the timestamps sit among the options: read in
// place when they open the options (alone or followed by SACK blocks),
// scanned otherwise.
func TestTimestampsInEveryOptionLayout(t *testing.T) {
	tests := []struct {
		name string
		// layout applies the option layout to a segment carrying
		// timestamps tsval and tsecr.
		layout func(s segment, tsval, tsecr uint32) segment
	}{
		{"timestamps alone", func(s segment, tsval, tsecr uint32) segment {
			s.timestamps, s.tsval, s.tsecr = true, tsval, tsecr
			return s
		}},
		{"timestamps then SACK", func(s segment, tsval, tsecr uint32) segment {
			s.timestamps, s.tsval, s.tsecr, s.sack = true, tsval, tsecr, true
			return s
		}},
		{"SACK then timestamps", func(s segment, tsval, tsecr uint32) segment {
			s.leadingOptions = []layers.TCPOption{nopOption, nopOption, sackOption,
				nopOption, nopOption, timestampOption(tsval, tsecr)}
			return s
		}},
	}
	for _, tt := range tests {
		for _, family := range []struct {
			name string
			ipv6 bool
		}{{"IPv4", false}, {"IPv6", true}} {
			t.Run(tt.name+"/"+family.name, func(t *testing.T) {
				d := loadDetached(t, false, 0)
				s := freshPorts(segment{ethernet: true, ipv6: family.ipv6})
				handshake(t, d, s, 7, 7)
				verdictOf(t, d, tt.layout(ackOf(s, 0), 100, 50), true)
				time.Sleep(time.Millisecond)
				verdictOf(t, d, tt.layout(peerData(s, 0, 1000), 60, 100), false)

				flows, err := d.Flows()
				require.NoError(t, err)
				require.Len(t, flows, 1)
				assert.Equal(t, uint64(1), flows[0].RTTSamples)
				assert.GreaterOrEqual(t, flows[0].RTTLatest, time.Millisecond)
				c, err := d.Counters()
				require.NoError(t, err)
				assert.Equal(t, uint64(1), c[m2hoCounterIdCNT_TS_STAMPED])
				assert.Equal(t, uint64(1), c[m2hoCounterIdCNT_RTT_SAMPLES])
			})
		}
	}
}

// TestSYNOptionsScannedPastTimestamps checks that a SYN whose options open
// with the aligned timestamps still has its MSS and window scale read.
func TestSYNOptionsScannedPastTimestamps(t *testing.T) {
	d := loadDetached(t, true, 0)
	s := freshPorts(segment{})
	syn := s
	syn.egress, syn.syn, syn.seq, syn.window = true, true, hostISN, 64240
	syn.leadingOptions = []layers.TCPOption{nopOption, nopOption, timestampOption(1, 0)}
	syn.mss, syn.wscale = 1200, 9
	verdictOf(t, d, syn, true)

	flows, err := d.Flows()
	require.NoError(t, err)
	require.Len(t, flows, 1)
	assert.Equal(t, uint16(1200), flows[0].MSS)
	assert.Equal(t, uint8(9), flows[0].WScale)
}
