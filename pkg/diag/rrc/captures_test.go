package rrc

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

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
	case diag.ChannelDLDCCH, diag.ChannelULDCCH, diag.ChannelULCCCH,
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
