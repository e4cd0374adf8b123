package rrc

import (
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/internal/shareddata"
	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/pkg/diag/gsmtap"
	"github.com/m2ho/m2ho/pkg/diag/qcdiag"
)

// repoRoot is the directory holding go.mod.
func repoRoot(t testing.TB) string {
	t.Helper()
	root, err := shareddata.RepoRoot()
	require.NoError(t, err)
	return root
}

// capture is the RRC messages of one shared capture file, in order.
type capture struct {
	name     string
	messages []diag.RRCMessage
}

// realCaptures reads every shared DIAG and GSMTAP capture through the
// transport packages, keeping the RRC messages of channels this package
// decodes.
func realCaptures(t testing.TB) []capture {
	t.Helper()
	data := shareddata.DataDir(t, "")
	var paths []string
	for _, pattern := range []string{"diag/*.mi2log", "diag/*.qmdl", "gsmtap/*.pcap", "gsmtap/*.pcapng"} {
		matches, err := filepath.Glob(filepath.Join(data, pattern))
		require.NoError(t, err)
		paths = append(paths, matches...)
	}
	sort.Strings(paths)
	require.NotEmpty(t, paths, "no capture under %s", data)
	var out []capture
	for _, path := range paths {
		c := capture{name: filepath.Base(path)}
		if strings.HasPrefix(filepath.Base(filepath.Dir(path)), "diag") {
			c.messages = readDIAG(t, path)
		} else {
			c.messages = readGSMTAP(t, path)
		}
		out = append(out, c)
	}
	return out
}

func decodedChannel(ch diag.RRCChannel) bool {
	switch ch {
	case diag.ChannelDLDCCH, diag.ChannelULDCCH, diag.ChannelULCCCH, diag.ChannelBCCHDLSCH,
		diag.ChannelRRCReconfiguration, diag.ChannelRRCReconfigurationComplete:
		return true
	}
	return false
}

func readDIAG(t testing.TB, path string) []diag.RRCMessage {
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	reader := qcdiag.NewReader(f, nil)
	var joiner qcdiag.RRCJoiner
	var out []diag.RRCMessage
	for {
		packet, err := reader.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			continue // counted by the reader; the stream goes on
		}
		msg, ok, err := joiner.Add(packet)
		if err == nil && ok && decodedChannel(msg.Channel) {
			out = append(out, msg)
		}
	}
}

func readGSMTAP(t testing.TB, path string) []diag.RRCMessage {
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var out []diag.RRCMessage
	// QCSuper's NR datagrams go through a joiner, as diagsrc reads them
	var joiner qcdiag.RRCJoiner
	_, err = gsmtap.ReadCapture(f, func(d gsmtap.Datagram) error {
		var msg diag.RRCMessage
		var ok bool
		var err error
		if d.DstPort == gsmtap.QCSuperNRPort {
			msg, ok, err = joiner.Add(qcdiag.LogPacket{Code: qcdiag.CodeNRRRCOTA, Payload: d.Payload})
		} else {
			msg, ok, err = gsmtap.Parse(d.Payload)
		}
		if err == nil && ok && decodedChannel(msg.Channel) {
			if msg.Time.IsZero() {
				msg.Time = d.Time
			}
			out = append(out, msg)
		}
		return nil
	})
	require.NoError(t, err)
	return out
}

// TestNetworkOfRealCaptures decodes the shared captures and checks the
// networks their connection setups select against what is known of
// them: the Xiaomi logs name theirs in the file name (_46000: MCC 460,
// MNC 00), the others are known from their sources (SOURCES.md) and
// their SIB1s. Each subscription of a dual-SIM log has its own decoder,
// and every network any of them names must be the expected one.
func TestNetworkOfRealCaptures(t *testing.T) {
	if _, err := shareddata.Locate(""); err != nil {
		t.Skip(err, "- the networks of the shared captures are not checked")
	}
	want := map[string][]string{
		// Two recordings of the log, in the US, with two SIMs.
		"mobility_sample.mi2log":                   {"310-260", "310-410"},
		"qcsuper_xperia_2g3g4g.pcap":               {"208-10"},
		"tram_ride_lte_nr.pcapng":                  {"228-01"},
		"tmobile.mi2log":                           nil, // no connection setup logged
		"20201115_181637_Xiaomi-Mi10_46000.mi2log": nil, // NR only, no setup
		"20201115_181751_Xiaomi-Mi10_46000.mi2log": nil,
		"20201115_181843_Xiaomi-Mi10_46000.mi2log": nil,
	}
	for _, c := range realCaptures(t) {
		t.Run(c.name, func(t *testing.T) {
			expected, known := want[c.name]
			if !known {
				require.True(t, strings.HasSuffix(c.name, "_46000.mi2log"), "no expected network for %s", c.name)
				expected = []string{"460-00"}
			}
			decoders := map[uint8]*Decoder{}
			var networks []string
			for _, msg := range c.messages {
				d, ok := decoders[msg.Subscription]
				if !ok {
					d = NewDecoder(slog.New(slog.DiscardHandler))
					decoders[msg.Subscription] = d
				}
				events, _ := d.Decode(msg) // errors are counted elsewhere
				for _, ev := range events {
					if ev.Type == diag.TypeNetwork {
						networks = append(networks, ev.PLMN)
					}
				}
			}
			t.Logf("networks: %v", networks)
			assert.Equal(t, expected, slices.Compact(networks))
		})
	}
}
