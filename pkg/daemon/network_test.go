package daemon

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/pkg/cellstore"
	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/pkg/estimator"
)

// TestNetworkFromTheModem: the network the modem names is the one the
// daemon's buffer estimates belong to when the configuration names
// none; a configured network stays, and a modem naming another is
// counted. /status says which is in use.
func TestNetworkFromTheModem(t *testing.T) {
	updated := time.Date(2026, 11, 22, 7, 0, 0, 0, time.UTC)
	tests := []struct {
		name       string
		configured string
		modem      []string
		want       NetworkStatus
		// wantBuffer is cell B's estimate in /status at the end.
		wantBuffer uint64
	}{
		{name: "nothing named: the records of no network", want: NetworkStatus{}, wantBuffer: 200000},
		{name: "the modem's network", modem: []string{"460-00", "460-00"},
			want: NetworkStatus{Network: "460-00", Source: NetworkFromModem, Modem: "460-00"}, wantBuffer: 400000},
		{name: "the configured network, which the modem agrees with", configured: "460-00", modem: []string{"460-00"},
			want: NetworkStatus{Network: "460-00", Source: NetworkFromConfig, Modem: "460-00"}, wantBuffer: 400000},
		{name: "the configured network, which the modem does not agree with", configured: "460-00", modem: []string{"310-260", "310-260", "460-00", "310-260"},
			want: NetworkStatus{Network: "460-00", Source: NetworkFromConfig, Modem: "310-260", Mismatches: 2}, wantBuffer: 400000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig(t)
			cfg.Fleet.Network = tt.configured
			store, err := cellstore.Open(cfg.StateDir, cellstore.Options{})
			require.NoError(t, err)
			for _, r := range []estimator.CellRecord{
				{Cell: cellB, BufferBytes: 200000, Bursts: 1, Updated: updated},
				{Network: "460-00", Cell: cellB, BufferBytes: 400000, Bursts: 1, Updated: updated},
				{Network: "310-260", Cell: cellB, BufferBytes: 900000, Bursts: 1, Updated: updated},
			} {
				require.NoError(t, store.SaveCell(r))
			}
			require.NoError(t, store.Close())

			h := startHarness(t, cfg)
			for _, plmn := range tt.modem {
				h.src.events <- diag.Event{Type: diag.TypeNetwork, PLMN: plmn}
			}
			// An event after them: the loop handled them once it is seen.
			h.src.events <- diag.Event{Type: diag.TypeMeasReport, Meas: diag.EventA1, Serving: cellA}
			require.Eventually(t, func() bool { return h.status(t).Serving == cellA }, 2*time.Second, time.Millisecond)
			st := h.status(t)
			assert.Equal(t, tt.want, st.Network)
			require.Len(t, st.Cells, 1)
			assert.Equal(t, tt.wantBuffer, st.Cells[0].BufferBytes)
			assert.Zero(t, st.Machine.Counters.Ignored["unknown_type"], "network events are the daemon's, not the machine's")
		})
	}
}
