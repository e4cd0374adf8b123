package diag_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/pkg/diag"
)

var (
	mmwaveA = diag.Cell{RAT: diag.RATNR, Band: diag.BandMmWave, PCI: 123, ARFCN: 2079167}
	mmwaveB = diag.Cell{RAT: diag.RATNR, Band: diag.BandMmWave, PCI: 456, ARFCN: 2079167}
	lteCell = diag.Cell{RAT: diag.RATLTE, Band: diag.BandSub6, PCI: 7, ARFCN: 66486}
)

func TestParseJSON(t *testing.T) {
	at := time.Date(2024, 3, 1, 12, 0, 0, 123456789, time.UTC)
	tests := []struct {
		name   string
		in     string
		want   diag.Event
		reason string
	}{
		{name: "design meas_report", in: `{"v":1,"type":"meas_report","event":"A3",
			"serving":{"rat":"nr","band":"mmwave","pci":123,"arfcn":2079167},
			"neighbor":{"rat":"nr","band":"mmwave","pci":456,"arfcn":2079167}}`,
			want: diag.Event{Type: diag.TypeMeasReport, Meas: diag.EventA3, Serving: mmwaveA, Neighbor: mmwaveB}},
		{name: "band derived from arfcn, rfc3339 time", in: `{"v":1,"type":"meas_report","event":"A2","t":"2024-03-01T12:00:00.123456789Z",
			"serving":{"rat":"nr","pci":123,"arfcn":2079167}}`,
			want: diag.Event{Type: diag.TypeMeasReport, Time: at, Meas: diag.EventA2, Serving: mmwaveA}},
		{name: "unix nanoseconds and unknown fields", in: `{"v":1,"type":"ho_command","kind":"pcell","t":1709294400123456789,"extra":[1,2],
			"source":{"rat":"lte","pci":7,"arfcn":66486},"target":{"rat":"nr","pci":456,"arfcn":2079167}}`,
			want: diag.Event{Type: diag.TypeHOCommand, Time: at, Kind: diag.HOPCell, Source: lteCell, Target: mmwaveB}},
		{name: "scg release without target", in: `{"v":1,"type":"ho_command","kind":"scg_release","source":{"rat":"nr","pci":123,"arfcn":2079167}}`,
			want: diag.Event{Type: diag.TypeHOCommand, Kind: diag.HOSCGRelease, Source: mmwaveA}},
		// Reports the RRC decoder makes from logs that do not name every
		// cell: GSMTAP v2 has no PCI (serving unknown), and a report may
		// carry no neighbour of the measured RAT.
		{name: "A1 without cells", in: `{"v":1,"type":"meas_report","event":"A1"}`,
			want: diag.Event{Type: diag.TypeMeasReport, Meas: diag.EventA1}},
		{name: "A3 without neighbor", in: `{"v":1,"type":"meas_report","event":"A3","serving":{"rat":"nr","pci":123,"arfcn":2079167}}`,
			want: diag.Event{Type: diag.TypeMeasReport, Meas: diag.EventA3, Serving: mmwaveA}},
		{name: "A5 without serving", in: `{"v":1,"type":"meas_report","event":"A5","neighbor":{"rat":"nr","pci":456,"arfcn":2079167}}`,
			want: diag.Event{Type: diag.TypeMeasReport, Meas: diag.EventA5, Neighbor: mmwaveB}},
		{name: "B1 with null cells", in: `{"v":1,"type":"meas_report","event":"B1","serving":null,"neighbor":null}`,
			want: diag.Event{Type: diag.TypeMeasReport, Meas: diag.EventB1}},
		{name: "ho_complete", in: `{"v":1,"type":"ho_complete","cell":{"rat":"nr","pci":456,"arfcn":2079167}}`,
			want: diag.Event{Type: diag.TypeHOComplete, Cell: mmwaveB}},
		{name: "ho_complete without cell", in: `{"v":1,"type":"ho_complete"}`, want: diag.Event{Type: diag.TypeHOComplete}},
		{name: "ho_failure", in: `{"v":1,"type":"ho_failure","cause":"rlf"}`, want: diag.Event{Type: diag.TypeHOFailure, Cause: diag.CauseRLF}},
		{name: "rb_alloc", in: `{"v":1,"type":"rb_alloc","cell":{"rat":"nr","band":"sub6","pci":7,"arfcn":640704},"slot_us":500,"slots":[[100,106],[0,106]]}`,
			want: diag.Event{Type: diag.TypeRBAlloc, Cell: diag.Cell{RAT: diag.RATNR, Band: diag.BandSub6, PCI: 7, ARFCN: 640704},
				SlotDuration: 500 * time.Microsecond, Slots: []diag.Slot{{Given: 100, Total: 106}, {Given: 0, Total: 106}}}},
		{name: "cho_config", in: `{"v":1,"type":"cho_config","serving":{"rat":"nr","pci":123,"arfcn":2079167},
			"candidates":[{"rat":"nr","pci":456,"arfcn":2079167},{"rat":"lte","pci":7,"arfcn":66486}]}`,
			want: diag.Event{Type: diag.TypeCHOConfig, Serving: mmwaveA, Candidates: []diag.Cell{mmwaveB, lteCell}}},
		{name: "cho_config without candidates", in: `{"v":1,"type":"cho_config"}`, want: diag.Event{Type: diag.TypeCHOConfig}},
		{name: "conditional ho_command", in: `{"v":1,"type":"ho_command","kind":"pcell","conditional":true,"target":{"rat":"nr","pci":456,"arfcn":2079167}}`,
			want: diag.Event{Type: diag.TypeHOCommand, Kind: diag.HOPCell, Target: mmwaveB, Conditional: true}},
		{name: "cho_config with a bad candidate", in: `{"v":1,"type":"cho_config","candidates":[{"rat":"umts","pci":1,"arfcn":1}]}`, reason: diag.ReasonJSONCell},
		{name: "network", in: `{"v":1,"type":"network","plmn":"460-00","cell":{"rat":"lte","pci":7,"arfcn":66486}}`,
			want: diag.Event{Type: diag.TypeNetwork, PLMN: "460-00", Cell: lteCell}},
		{name: "network of a three-digit mnc without cell", in: `{"v":1,"type":"network","plmn":"310-410"}`,
			want: diag.Event{Type: diag.TypeNetwork, PLMN: "310-410"}},
		{name: "network without plmn", in: `{"v":1,"type":"network"}`, reason: diag.ReasonJSONField},
		{name: "network with a one-digit mnc", in: `{"v":1,"type":"network","plmn":"460-0"}`, reason: diag.ReasonJSONField},
		{name: "network with a four-digit mcc", in: `{"v":1,"type":"network","plmn":"4600-00"}`, reason: diag.ReasonJSONField},
		{name: "network with letters", in: `{"v":1,"type":"network","plmn":"46a-00"}`, reason: diag.ReasonJSONField},
		{name: "network with a bad cell", in: `{"v":1,"type":"network","plmn":"460-00","cell":{"rat":"wifi","pci":1,"arfcn":1}}`, reason: diag.ReasonJSONCell},
		{name: "rrc_release", in: `{"v":1,"type":"rrc_release","cell":{"rat":"lte","pci":7,"arfcn":66486}}`,
			want: diag.Event{Type: diag.TypeRRCRelease, Cell: lteCell}},
		{name: "rrc_release without cell", in: `{"v":1,"type":"rrc_release"}`, want: diag.Event{Type: diag.TypeRRCRelease}},
		{name: "rrc_release redirecting to an nr carrier", in: `{"v":1,"type":"rrc_release","cell":{"rat":"lte","pci":7,"arfcn":66486},
			"redirect":{"rat":"nr","arfcn":2079167}}`,
			want: diag.Event{Type: diag.TypeRRCRelease, Cell: lteCell, Redirect: diag.Carrier{RAT: diag.RATNR, ARFCN: 2079167}}},
		{name: "rrc_release redirecting to carrier 0", in: `{"v":1,"type":"rrc_release","redirect":{"rat":"lte","arfcn":0}}`,
			want: diag.Event{Type: diag.TypeRRCRelease, Redirect: diag.Carrier{RAT: diag.RATLTE}}},
		{name: "rrc_release redirecting to another rat", in: `{"v":1,"type":"rrc_release","redirect":{"rat":"utra","arfcn":10564}}`, reason: diag.ReasonJSONCell},
		{name: "rrc_release redirect without arfcn", in: `{"v":1,"type":"rrc_release","redirect":{"rat":"lte"}}`, reason: diag.ReasonJSONCell},
		{name: "rrc_release redirect beyond the earfcns", in: `{"v":1,"type":"rrc_release","redirect":{"rat":"lte","arfcn":262144}}`, reason: diag.ReasonJSONCell},
		{name: "rrc_release with a bad cell", in: `{"v":1,"type":"rrc_release","cell":{"rat":"nr","pci":1008,"arfcn":1}}`, reason: diag.ReasonJSONCell},
		{name: "syntax", in: `{"v":1,"type":`, reason: diag.ReasonJSONSyntax},
		{name: "not an object", in: `[1,2]`, reason: diag.ReasonJSONField},
		{name: "missing version", in: `{"type":"ho_failure","cause":"rlf"}`, reason: diag.ReasonJSONVersion},
		{name: "version 2", in: `{"v":2,"type":"ho_failure","cause":"rlf"}`, reason: diag.ReasonJSONVersion},
		{name: "unknown type", in: `{"v":1,"type":"bogus"}`, reason: diag.ReasonJSONType},
		{name: "bad time string", in: `{"v":1,"type":"ho_failure","cause":"rlf","t":"yesterday"}`, reason: diag.ReasonJSONTime},
		{name: "negative time", in: `{"v":1,"type":"ho_failure","cause":"rlf","t":-5}`, reason: diag.ReasonJSONTime},
		{name: "fractional time", in: `{"v":1,"type":"ho_failure","cause":"rlf","t":1.5}`, reason: diag.ReasonJSONTime},
		{name: "unknown cause", in: `{"v":1,"type":"ho_failure","cause":"gremlins"}`, reason: diag.ReasonJSONField},
		{name: "unknown event", in: `{"v":1,"type":"meas_report","event":"C1","serving":{"rat":"nr","pci":1,"arfcn":1}}`, reason: diag.ReasonJSONField},
		{name: "meas_report without event", in: `{"v":1,"type":"meas_report","serving":{"rat":"nr","pci":1,"arfcn":1}}`, reason: diag.ReasonJSONField},
		{name: "meas_report with bad serving", in: `{"v":1,"type":"meas_report","event":"A1","serving":{"rat":"nr","pci":1008,"arfcn":1}}`, reason: diag.ReasonJSONCell},
		{name: "meas_report with serving without rat", in: `{"v":1,"type":"meas_report","event":"A1","serving":{"pci":1,"arfcn":1}}`, reason: diag.ReasonJSONCell},
		{name: "meas_report with bad neighbor", in: `{"v":1,"type":"meas_report","event":"A3","neighbor":{"rat":"lte","pci":1}}`, reason: diag.ReasonJSONCell},
		{name: "meas_report with empty neighbor object", in: `{"v":1,"type":"meas_report","event":"A3","neighbor":{}}`, reason: diag.ReasonJSONCell},
		{name: "lte pci out of range", in: `{"v":1,"type":"ho_complete","cell":{"rat":"lte","pci":504,"arfcn":1}}`, reason: diag.ReasonJSONCell},
		{name: "nr arfcn out of range", in: `{"v":1,"type":"ho_complete","cell":{"rat":"nr","pci":1,"arfcn":3279166}}`, reason: diag.ReasonJSONCell},
		{name: "unknown rat", in: `{"v":1,"type":"ho_complete","cell":{"rat":"wifi","pci":1,"arfcn":1}}`, reason: diag.ReasonJSONCell},
		{name: "unknown band", in: `{"v":1,"type":"ho_complete","cell":{"rat":"nr","band":"thz","pci":1,"arfcn":1}}`, reason: diag.ReasonJSONCell},
		{name: "pci as string", in: `{"v":1,"type":"ho_complete","cell":{"rat":"nr","pci":"1","arfcn":1}}`, reason: diag.ReasonJSONField},
		{name: "unknown kind", in: `{"v":1,"type":"ho_command","kind":"teleport","target":{"rat":"nr","pci":1,"arfcn":1}}`, reason: diag.ReasonJSONField},
		{name: "pcell without target", in: `{"v":1,"type":"ho_command","kind":"pcell"}`, reason: diag.ReasonJSONCell},
		{name: "rb_alloc given above total", in: `{"v":1,"type":"rb_alloc","cell":{"rat":"nr","pci":1,"arfcn":1},"slot_us":500,"slots":[[107,106]]}`, reason: diag.ReasonJSONField},
		{name: "rb_alloc no slots", in: `{"v":1,"type":"rb_alloc","cell":{"rat":"nr","pci":1,"arfcn":1},"slot_us":500,"slots":[]}`, reason: diag.ReasonJSONField},
		{name: "rb_alloc slot of three", in: `{"v":1,"type":"rb_alloc","cell":{"rat":"nr","pci":1,"arfcn":1},"slot_us":500,"slots":[[1,2,3]]}`, reason: diag.ReasonJSONField},
		{name: "rb_alloc zero slot time", in: `{"v":1,"type":"rb_alloc","cell":{"rat":"nr","pci":1,"arfcn":1},"slot_us":0,"slots":[[1,2]]}`, reason: diag.ReasonJSONField},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ev, err := diag.ParseJSON([]byte(tc.in))
			if tc.reason != "" {
				var pe *diag.ParseError
				require.True(t, errors.As(err, &pe), "want a *ParseError, got %v", err)
				assert.Equal(t, tc.reason, pe.Reason, pe.Error())
				assert.Equal(t, tc.reason, diag.ErrorReason(err, "other"))
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, ev)
		})
	}
}

func TestMarshalJSONRoundTrip(t *testing.T) {
	at := time.Date(2024, 3, 1, 12, 0, 0, 5000, time.UTC)
	events := []diag.Event{
		{Type: diag.TypeMeasReport, Time: at, Meas: diag.EventB1, Serving: lteCell, Neighbor: mmwaveA},
		{Type: diag.TypeMeasReport, Meas: diag.EventA1, Serving: mmwaveA},
		// Shapes the RRC decoder produces when the log leaves cells out.
		{Type: diag.TypeMeasReport, Time: at, Meas: diag.EventA1},
		{Type: diag.TypeMeasReport, Time: at, Meas: diag.EventA5, Neighbor: mmwaveA},
		{Type: diag.TypeMeasReport, Time: at, Meas: diag.EventA5, Serving: lteCell},
		{Type: diag.TypeMeasReport, Time: at, Meas: diag.EventA6},
		{Type: diag.TypeMeasReport, Time: at, Meas: diag.EventA3,
			Serving: diag.Cell{RAT: diag.RATLTE, Band: diag.BandSub6}, Neighbor: diag.Cell{RAT: diag.RATLTE, Band: diag.BandSub6, PCI: 12}},
		{Type: diag.TypeHOCommand, Time: at, Kind: diag.HOPCell, Target: lteCell},
		{Type: diag.TypeHOCommand, Time: at, Kind: diag.HOSCGRelease, Source: mmwaveA},
		{Type: diag.TypeHOCommand, Time: at, Kind: diag.HOSCGRelease, Source: mmwaveA, Target: lteCell},
		{Type: diag.TypeHOComplete, Time: at},
		{Type: diag.TypeHOFailure, Time: at, Cause: diag.CauseReestablishment},
		{Type: diag.TypeHOCommand, Time: at, Kind: diag.HOSCGChange, Source: mmwaveA, Target: mmwaveB},
		{Type: diag.TypeHOComplete, Time: at, Cell: mmwaveB},
		{Type: diag.TypeHOFailure, Time: at, Cause: diag.CauseNASRecovery},
		{Type: diag.TypeRBAlloc, Time: at, Cell: lteCell, SlotDuration: time.Millisecond, Slots: []diag.Slot{{Given: 50, Total: 100}}},
		{Type: diag.TypeCHOConfig, Time: at, Serving: lteCell, Candidates: []diag.Cell{mmwaveA, mmwaveB}},
		{Type: diag.TypeCHOConfig, Time: at, Serving: lteCell},
		{Type: diag.TypeHOCommand, Time: at, Kind: diag.HOPCell, Source: mmwaveA, Target: mmwaveB, Conditional: true},
		{Type: diag.TypeNetwork, Time: at, PLMN: "460-00", Cell: lteCell},
		{Type: diag.TypeNetwork, Time: at, PLMN: "001-001"},
		{Type: diag.TypeRRCRelease, Time: at, Cell: lteCell},
		{Type: diag.TypeRRCRelease, Time: at},
		{Type: diag.TypeRRCRelease, Time: at, Cell: mmwaveA, Redirect: diag.Carrier{RAT: diag.RATLTE, ARFCN: 850}},
		{Type: diag.TypeRRCRelease, Time: at, Redirect: diag.Carrier{RAT: diag.RATNR, ARFCN: 2079167}},
	}
	for i, ev := range events {
		t.Run(fmt.Sprintf("%d_%s_%s%s", i, ev.Type, ev.Meas, ev.Kind), func(t *testing.T) {
			line, err := diag.MarshalJSON(ev)
			require.NoError(t, err)
			if !ev.Time.IsZero() {
				assert.Contains(t, string(line), `"t":"2024-03-01T12:00:00.000005000Z"`)
			}
			back, err := diag.ParseJSON(line)
			require.NoError(t, err, string(line))
			assert.Equal(t, ev, back)
		})
	}
	_, err := diag.MarshalJSON(diag.Event{Type: "bogus"})
	assert.Error(t, err)
}

func FuzzParseJSON(f *testing.F) {
	seeds := []string{
		`{"v":1,"type":"meas_report","event":"A3","serving":{"rat":"nr","band":"mmwave","pci":123,"arfcn":2079167},"neighbor":{"rat":"nr","band":"mmwave","pci":456,"arfcn":2079167}}`,
		`{"v":1,"type":"ho_command","kind":"pcell","source":{"rat":"lte","pci":1,"arfcn":2},"target":{"rat":"nr","pci":3,"arfcn":4},"t":1700000000000000000}`,
		`{"v":1,"type":"ho_complete","cell":{"rat":"nr","pci":3,"arfcn":4},"t":"2024-01-01T00:00:00.5Z"}`,
		`{"v":1,"type":"ho_failure","cause":"rlf"}`,
		`{"v":1,"type":"network","plmn":"460-00","cell":{"rat":"lte","pci":3,"arfcn":4}}`,
		`{"v":1,"type":"rrc_release","cell":{"rat":"lte","pci":3,"arfcn":4},"redirect":{"rat":"nr","arfcn":627264}}`,
		`{"v":1,"type":"rb_alloc","cell":{"rat":"nr","pci":3,"arfcn":4},"slot_us":500,"slots":[[100,106],[106,106],[20,106],[0,106]]}`,
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		ev, err := diag.ParseJSON(line)
		if err != nil {
			var pe *diag.ParseError
			if !errors.As(err, &pe) || pe.Reason == "" {
				t.Fatalf("error without a reason: %v", err)
			}
			return
		}
		out, err := diag.MarshalJSON(ev)
		if err != nil {
			t.Fatalf("accepted event does not marshal: %v", err)
		}
		back, err := diag.ParseJSON(out)
		if err != nil {
			t.Fatalf("marshalled event rejected: %v\n%s", err, out)
		}
		if !back.Time.Equal(ev.Time) {
			t.Fatalf("time changed: %v -> %v", ev.Time, back.Time)
		}
		back.Time = ev.Time
		if diff := compareEvents(ev, back); diff != "" {
			t.Fatalf("round trip changed the event: %s", diff)
		}
	})
}

func compareEvents(a, b diag.Event) string {
	if a.Type != b.Type || a.Meas != b.Meas || a.Serving != b.Serving || a.Neighbor != b.Neighbor ||
		a.Kind != b.Kind || a.Source != b.Source || a.Target != b.Target || a.Cell != b.Cell ||
		a.Cause != b.Cause || a.PLMN != b.PLMN || a.Redirect != b.Redirect || a.SlotDuration != b.SlotDuration || len(a.Slots) != len(b.Slots) {
		return "fields differ"
	}
	for i := range a.Slots {
		if a.Slots[i] != b.Slots[i] {
			return "slots differ"
		}
	}
	return ""
}

func TestFormatPLMN(t *testing.T) {
	tests := []struct {
		name     string
		mcc, mnc []int
		want     string
	}{
		{name: "two-digit mnc", mcc: []int{4, 6, 0}, mnc: []int{0, 0}, want: "460-00"},
		{name: "three-digit mnc", mcc: []int{3, 1, 0}, mnc: []int{4, 1, 0}, want: "310-410"},
		{name: "two-digit mcc", mcc: []int{4, 6}, mnc: []int{0, 0}},
		{name: "one-digit mnc", mcc: []int{4, 6, 0}, mnc: []int{0}},
		{name: "four-digit mnc", mcc: []int{4, 6, 0}, mnc: []int{0, 0, 0, 0}},
		{name: "digit above 9", mcc: []int{4, 6, 10}, mnc: []int{0, 0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := diag.FormatPLMN(tc.mcc, tc.mnc)
			assert.Equal(t, tc.want, got)
			assert.Equal(t, tc.want != "", diag.ValidPLMN(got))
		})
	}
}
