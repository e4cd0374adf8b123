package diag_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/internal/nstest"
	"github.com/m2ho/m2ho/pkg/diag"
)

// TestUDPSourceAbsorbsBursts sends bursts of events while nothing reads
// the socket, as when the daemon's event queue is full: every one of them
// must wait in the receive buffer rather than be lost. The default buffer
// (about 200 KiB) holds a few hundred such datagrams.
func TestUDPSourceAbsorbsBursts(t *testing.T) {
	// SO_RCVBUFFORCE passes over net.core.rmem_max only with CAP_NET_ADMIN
	nstest.RequireRoot(t)
	tests := []struct {
		name  string
		burst int
	}{
		{"single datagram", 1},
		{"a tenth of a second at 10,000 events/s", 1000},
		{"a quarter of a second at 10,000 events/s", 2500},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			stats := &diag.Stats{}
			src, conn := listenUDPDialed(t, stats)
			for range tc.burst {
				_, err := conn.Write([]byte(failureLine))
				require.NoError(t, err)
			}
			events, err := collect(t, t.Context(), src, tc.burst)
			assert.ErrorIs(t, err, context.Canceled)
			assert.Len(t, events, tc.burst)
			assert.Empty(t, errorsOf(stats))
		})
	}
}
