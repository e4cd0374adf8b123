package testbed

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestM2hodArgsScaleTheDefaultBuffer(t *testing.T) {
	base := []string{
		"--iface", "wwan0",
		"--diag", "udp://" + DiagAddr,
		"--mode", "enforce",
		"--listen", M2hodListen,
		"--state-dir", "/run/state",
		"--pin-dir", "",
	}
	tests := []struct {
		name  string
		scale float64
		want  []string
	}{
		{name: "full scale keeps the daemon's default", scale: 1, want: base},
		{name: "unset scale keeps the daemon's default", scale: 0, want: base},
		{name: "scale 0.1 shrinks the 1 MiB default", scale: 0.1, want: append(append([]string(nil), base...), "--default-buffer", "104857")},
		{name: "a tiny scale stays at the smallest clamp", scale: 1e-6, want: append(append([]string(nil), base...), "--default-buffer", "65536")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, m2hodArgs("wwan0", "/run/state", tc.scale, Variant{CC: "cubic", M2HO: true}))
		})
	}
}

func TestM2hodArgsSelectThePolicy(t *testing.T) {
	tests := []struct {
		variant string
		want    []string
	}{
		{variant: "cubic+m2ho", want: []string{}},
		{variant: "cubic+freeze", want: []string{"--policy", "freeze"}},
		{variant: "bbr+m2ho-no-prediction", want: []string{"--ablate", "prediction"}},
		{variant: "cubic+m2ho-no-suppression-no-bandwidth_clamp", want: []string{"--ablate", "suppression,bandwidth_clamp"}},
	}
	for _, tc := range tests {
		t.Run(tc.variant, func(t *testing.T) {
			v, err := ParseVariant(tc.variant)
			require.NoError(t, err)
			args := m2hodArgs("wwan0", "/run/state", 1, v)
			assert.Equal(t, tc.want, args[12:], "flags after the fixed ones")
		})
	}
}

func TestProcessUsageOfThisProcess(t *testing.T) {
	// Burn a little CPU so the process has at least one clock tick.
	for start := time.Now(); time.Since(start) < 3*clockTick; {
	}
	cpu, err := processCPU(os.Getpid())
	require.NoError(t, err)
	assert.Positive(t, cpu, "a process that spun for three ticks has used CPU")
	rss, peak, err := processMemory(os.Getpid())
	require.NoError(t, err)
	assert.Positive(t, rss)
	assert.GreaterOrEqual(t, peak, rss)
}

func TestVariantSuppresses(t *testing.T) {
	for variant, want := range map[string]bool{
		"cubic": false, "cubic+m2ho": true, "bbr+m2ho": true, "cubic+freeze": false,
		"cubic+m2ho-no-suppression": false, "cubic+m2ho-no-prediction": true,
	} {
		v, err := ParseVariant(variant)
		require.NoError(t, err)
		assert.Equal(t, want, v.Suppresses(), variant)
	}
}

// TestStateDirStartsEmpty checks that a run's m2hod does not inherit the
// cell estimates an earlier run left in the same directory.
func TestStateDirStartsEmpty(t *testing.T) {
	outDir := t.TempDir()
	stale := filepath.Join(outDir, m2hodStateDir, "cells.db")
	require.NoError(t, os.MkdirAll(filepath.Dir(stale), 0o755))
	require.NoError(t, os.WriteFile(stale, []byte("learned cells"), 0o644))

	require.NoError(t, freshStateDir(outDir))
	entries, err := os.ReadDir(filepath.Join(outDir, m2hodStateDir))
	require.NoError(t, err)
	assert.Empty(t, entries)
}

func TestFleetNeedsM2HO(t *testing.T) {
	for _, cfg := range []Config{
		{Variant: Variant{CC: "cubic"}, Fleet: &Fleet{Server: []string{"nats-server"}, Host: "cpe1"}},
		{Variant: Variant{CC: "cubic", M2HO: true}, M2hod: "m2hod", Fleet: &Fleet{Host: "cpe1"}},
	} {
		_, err := Run(t.Context(), cfg)
		assert.ErrorContains(t, err, "a fleet store needs an m2ho variant and a server command")
	}
}

func TestRunRefusesANegativeDiagFlush(t *testing.T) {
	_, err := Run(t.Context(), Config{Variant: Variant{CC: "cubic"}, OutDir: t.TempDir(), DiagFlush: -time.Millisecond})
	assert.ErrorContains(t, err, "negative diag flush period")
}
