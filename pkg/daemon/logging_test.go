package daemon

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/pkg/config"
	"github.com/m2ho/m2ho/pkg/datapath"
)

func TestLogFormats(t *testing.T) {
	tests := []struct {
		format config.LogFormat
		want   []string
	}{
		{config.LogJournal, []string{
			`<7>level=DEBUG msg=detail iface=wwan0`,
			`<6>level=INFO msg="m2hod ready" iface=wwan0`,
			`<4>level=WARN msg=retrying iface=wwan0 err=gone`,
			`<3>level=ERROR msg=failed iface=wwan0`,
		}},
		{config.LogText, []string{`level=DEBUG msg=detail iface=wwan0`, `level=INFO msg="m2hod ready" iface=wwan0`}},
		{config.LogJSON, []string{`"level":"DEBUG","msg":"detail","iface":"wwan0"}`, `"level":"INFO","msg":"m2hod ready","iface":"wwan0"}`}},
	}
	for _, tt := range tests {
		t.Run(string(tt.format), func(t *testing.T) {
			var b strings.Builder
			logger := NewLogger(&b, tt.format, slog.LevelDebug).With("iface", "wwan0")
			logger.Debug("detail")
			logger.Info("m2hod ready")
			logger.Warn("retrying", "err", "gone")
			logger.Error("failed")
			lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
			require.Len(t, lines, 4)
			for i, want := range tt.want {
				assert.True(t, strings.HasSuffix(lines[i], want), "line %q ends with %q", lines[i], want)
			}
			for _, line := range lines {
				assert.Equal(t, tt.format != config.LogJournal, strings.Contains(line, "time"),
					"one time a line, none where the journal stamps it: %q", line)
			}
		})
	}
}

// TestLogFormatAuto: journal when stderr is the stream systemd names in
// $JOURNAL_STREAM, text otherwise.
func TestLogFormatAuto(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
	require.NoError(t, err)
	defer f.Close()
	info, err := f.Stat()
	require.NoError(t, err)
	st := info.Sys().(*syscall.Stat_t)

	t.Setenv("JOURNAL_STREAM", fmt.Sprintf("%d:%d", st.Dev, st.Ino))
	NewLogger(f, config.LogAuto, slog.LevelInfo).Info("to the journal")
	t.Setenv("JOURNAL_STREAM", fmt.Sprintf("%d:%d", st.Dev, st.Ino+1))
	NewLogger(f, config.LogAuto, slog.LevelInfo).Info("redirected")
	data, err := os.ReadFile(f.Name())
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	require.Len(t, lines, 2)
	assert.Equal(t, `<6>level=INFO msg="to the journal"`, lines[0])
	assert.True(t, strings.HasPrefix(lines[1], "time="), lines[1])
}

func TestCheckKernel(t *testing.T) {
	for release, wantErr := range map[string]string{
		"6.18.44-fc-v669":   "",
		"5.19.0":            "",
		"6.1.0-18-amd64":    "",
		"5.15.0-91-generic": "Linux 5.15.0-91-generic is too old: m2hod needs Linux 5.19 or newer",
		"4.19.0+":           "Linux 4.19.0+ is too old: m2hod needs Linux 5.19 or newer",
		"unreadable":        "",
	} {
		err := checkKernel(release)
		if wantErr == "" {
			assert.NoError(t, err, release)
			continue
		}
		assert.EqualError(t, err, wantErr)
		assert.ErrorIs(t, err, datapath.ErrUnsupported, "exits as a kernel that cannot run the programs")
	}
}
