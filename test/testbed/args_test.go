package testbed

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestM2hodArgsScaleTheDefaultBuffer(t *testing.T) {
	base := []string{
		"--iface", "wwan0",
		"--diag", "udp://" + DiagAddr,
		"--mode", "enforce",
		"--listen", M2hodListen,
		"--state-dir", "/run/state",
	}
	tests := []struct {
		name  string
		scale float64
		want  []string
	}{
		{name: "full scale keeps the daemon's default", scale: 1, want: base},
		{name: "unset scale keeps the daemon's default", scale: 0, want: base},
		{name: "scale 0.1 shrinks the 1 MiB default", scale: 0.1, want: append(append([]string(nil), base...), "--default-buffer", "104857")},
		{name: "a tiny scale stays at one packet", scale: 1e-6, want: append(append([]string(nil), base...), "--default-buffer", "1500")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, m2hodArgs("wwan0", "/run/state", tc.scale))
		})
	}
}
