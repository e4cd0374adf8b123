package rrc

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/pkg/diag"
)

// benchmarkDecode decodes the same PDU repeatedly with a decoder prepared
// by the setup vectors and reports messages per second.
func benchmarkDecode(b *testing.B, vector string, setup ...string) {
	d := NewDecoder(nil)
	for _, name := range setup {
		_, err := d.Decode(vectorByName(b, name))
		require.NoError(b, err)
	}
	msg := vectorByName(b, vector)
	b.ReportAllocs()
	b.SetBytes(int64(len(msg.PDU)))
	b.ResetTimer()
	start := time.Now()
	for b.Loop() {
		if _, err := d.Decode(msg); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
}

// BenchmarkDecodeLTEMeasurementReport is the figure of merit: decoded
// and resolved LTE measurement reports per second (target > 50,000).
func BenchmarkDecodeLTEMeasurementReport(b *testing.B) {
	benchmarkDecode(b, "lte_mr_a3", "lte_reconf_measconfig_a3")
}

// BenchmarkDecodeNRMeasurementReport decodes EN-DC NR reports relayed in
// LTE ulInformationTransferMRDC-r15 (an LTE then an NR decode).
func BenchmarkDecodeNRMeasurementReport(b *testing.B) {
	benchmarkDecode(b, "lte_mrdc_nr_mr_a3", "lte_reconf_endc_measconfig")
}

// BenchmarkDecodeLTEReconfigurationENDC decodes an LTE reconfiguration
// carrying an NR RRCReconfiguration and its CellGroupConfig, the largest
// messages m2ho reads.
func BenchmarkDecodeLTEReconfigurationENDC(b *testing.B) {
	benchmarkDecode(b, "lte_reconf_scg_add")
}

// TestBenchmarkVectorsResolve makes sure the measurement report
// benchmarks measure the full path, ending in an event.
func TestBenchmarkVectorsResolve(t *testing.T) {
	tests := []struct {
		vector string
		setup  []string
	}{
		{"lte_mr_a3", []string{"lte_reconf_measconfig_a3"}},
		{"lte_mrdc_nr_mr_a3", []string{"lte_reconf_endc_measconfig"}},
	}
	for _, tt := range tests {
		t.Run(tt.vector, func(t *testing.T) {
			d := NewDecoder(nil)
			for _, name := range tt.setup {
				_, err := d.Decode(vectorByName(t, name))
				require.NoError(t, err)
			}
			events, err := d.Decode(vectorByName(t, tt.vector))
			require.NoError(t, err)
			require.Len(t, events, 1)
			require.Equal(t, diag.TypeMeasReport, events[0].Type)
		})
	}
}
