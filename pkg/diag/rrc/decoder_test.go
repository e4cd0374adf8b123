package rrc

import (
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/pkg/diag"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func lteCell(pci uint16, arfcn uint32) diag.Cell {
	return diag.Cell{RAT: diag.RATLTE, PCI: pci, ARFCN: arfcn}.Normalized()
}

func nrCell(pci uint16, arfcn uint32) diag.Cell {
	return diag.Cell{RAT: diag.RATNR, PCI: pci, ARFCN: arfcn}.Normalized()
}

// step is one summarised message fed to the decoder, and what it must
// yield.
type step struct {
	rat     diag.RAT        // default LTE
	channel diag.RRCChannel // default DL-DCCH
	// cell is the cell the transport says the PDU came from: nil for the
	// LTE serving cell of the test, a zero cell when the transport does
	// not say.
	cell *diag.Cell
	// after is when the message comes after the start of the test: by
	// default one ms per step.
	after   time.Duration
	pdu     []byte // only compared, to recognise repeated EN-DC containers
	summary Summary
	want    []diag.Event
	wantErr error
}

// lteMeasSetup configures an LTE measConfig: object 1 is LTE 1300,
// object 2 NR mmWave 2079167; measId 1 = A3 on 1, 2 = B1 on 2, 3 =
// periodical on 1.
var lteMeasSetup = &MeasConfigDelta{
	Objects: []MeasObject{{ID: 1, RAT: diag.RATLTE, Carrier: 1300}, {ID: 2, RAT: diag.RATNR, Carrier: 2079167}},
	Reports: []ReportConfig{{ID: 1, Event: diag.EventA3}, {ID: 2, Event: diag.EventB1}, {ID: 3}},
	MeasIDs: []MeasIDLink{{ID: 1, Object: 1, Report: 1}, {ID: 2, Object: 2, Report: 2}, {ID: 3, Object: 1, Report: 3}},
}

func lteReconf(s Summary) Summary {
	s.Message = "rrcConnectionReconfiguration"
	return s
}

func lteReport(measID int, neighbors ...NeighborCell) Summary {
	return Summary{Message: "measurementReport", Report: &MeasReport{MeasID: measID, Neighbors: neighbors}}
}

var lteComplete = Summary{Message: "rrcConnectionReconfigurationComplete"}

func scgContainer(pdu []byte, pci uint16, arfcn uint32) *ENDCConfig {
	return &ENDCConfig{nested: pdu, SecondaryCellGroup: &Summary{
		Message:       "rrcReconfiguration",
		SecondarySync: &SyncTarget{PCI: pci, HasPCI: true, Carrier: arfcn},
	}}
}

func cellRef(c diag.Cell) *diag.Cell { return &c }

// released is what a connection release on cell yields.
func released(cell diag.Cell) []diag.Event {
	return []diag.Event{{Type: diag.TypeRRCRelease, Cell: cell}}
}

func TestDecoderSequences(t *testing.T) {
	serving := lteCell(10, 1300)
	noCell := &diag.Cell{}
	scgA, scgB := nrCell(625, 504990), nrCell(626, 504990)
	target := lteCell(300, 1850)
	// twoCarriers measures LTE 1300 and 1850: measId 1 = A3 on 1300, 4 =
	// A5 on 1850.
	twoCarriers := &MeasConfigDelta{
		Objects: []MeasObject{{ID: 1, RAT: diag.RATLTE, Carrier: 1300}, {ID: 3, RAT: diag.RATLTE, Carrier: 1850}},
		Reports: []ReportConfig{{ID: 1, Event: diag.EventA3}, {ID: 2, Event: diag.EventA5}},
		MeasIDs: []MeasIDLink{{ID: 1, Object: 1, Report: 1}, {ID: 4, Object: 3, Report: 2}},
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"reports resolve through the measConfig", []step{
			{summary: lteReconf(Summary{MeasConfig: lteMeasSetup})},
			{summary: lteReport(1, NeighborCell{RAT: diag.RATLTE, PCI: 201}), want: []diag.Event{
				{Type: diag.TypeMeasReport, Meas: diag.EventA3, Serving: serving, Neighbor: lteCell(201, 1300)}}},
			{summary: lteReport(2, NeighborCell{RAT: diag.RATNR, PCI: 55}), want: []diag.Event{
				{Type: diag.TypeMeasReport, Meas: diag.EventB1, Serving: serving, Neighbor: nrCell(55, 2079167)}}},
			{summary: lteReport(1), want: []diag.Event{
				{Type: diag.TypeMeasReport, Meas: diag.EventA3, Serving: serving}}},
			{summary: lteReport(3, NeighborCell{RAT: diag.RATLTE, PCI: 201})},
			{summary: lteReport(9), wantErr: ErrUnresolvedMeasID},
		}},
		{"removing an object or report removes its measIds", []step{
			{summary: lteReconf(Summary{MeasConfig: lteMeasSetup})},
			{summary: lteReconf(Summary{MeasConfig: &MeasConfigDelta{ObjectsRemoved: []int{1}, ReportsRemoved: []int{2}}})},
			{summary: lteReport(1), wantErr: ErrUnresolvedMeasID},
			{summary: lteReport(2), wantErr: ErrUnresolvedMeasID},
			{summary: lteReport(3), wantErr: ErrUnresolvedMeasID},
		}},
		{"modification without carrier keeps the carrier; measId re-pointed", []step{
			{summary: lteReconf(Summary{MeasConfig: lteMeasSetup})},
			{summary: lteReconf(Summary{MeasConfig: &MeasConfigDelta{
				Objects: []MeasObject{{ID: 1, RAT: diag.RATLTE}},
				MeasIDs: []MeasIDLink{{ID: 3, Object: 1, Report: 1}},
			}})},
			{summary: lteReport(3, NeighborCell{RAT: diag.RATLTE, PCI: 7}), want: []diag.Event{
				{Type: diag.TypeMeasReport, Meas: diag.EventA3, Serving: serving, Neighbor: lteCell(7, 1300)}}},
		}},
		{"a new connection's measIds follow a handover through its own objects", []step{
			{summary: lteReconf(Summary{MeasConfig: &MeasConfigDelta{
				Objects: []MeasObject{{ID: 1, RAT: diag.RATLTE, Carrier: 1300}, {ID: 3, RAT: diag.RATLTE, Carrier: 1850}},
				Reports: []ReportConfig{{ID: 1, Event: diag.EventA3}},
				MeasIDs: []MeasIDLink{{ID: 1, Object: 1, Report: 1}},
			}})},
			{summary: Summary{Message: "rrcConnectionRelease"}, want: released(serving)},
			{channel: diag.ChannelULCCCH, summary: Summary{Message: "rrcConnectionRequest"}},
			// The new connection numbers its objects differently; the
			// released objects 1 and 3 must not steer the re-linking.
			{summary: lteReconf(Summary{MeasConfig: &MeasConfigDelta{
				Objects: []MeasObject{{ID: 4, RAT: diag.RATLTE, Carrier: 1300}, {ID: 5, RAT: diag.RATLTE, Carrier: 1850}},
				Reports: []ReportConfig{{ID: 1, Event: diag.EventA3}},
				MeasIDs: []MeasIDLink{{ID: 1, Object: 4, Report: 1}},
			}})},
			{summary: lteReconf(Summary{Sync: &SyncTarget{PCI: 300, HasPCI: true, Carrier: 1850}}), want: []diag.Event{
				{Type: diag.TypeHOCommand, Kind: diag.HOPCell, Source: serving, Target: lteCell(300, 1850)}}},
			{cell: cellRef(lteCell(300, 1850)), summary: lteReport(1, NeighborCell{RAT: diag.RATLTE, PCI: 301}), want: []diag.Event{
				{Type: diag.TypeMeasReport, Meas: diag.EventA3, Serving: lteCell(300, 1850), Neighbor: lteCell(301, 1850)}}},
		}},
		{"a report of the connection before a release resolves when the release was another connection's", []step{
			{summary: lteReconf(Summary{MeasConfig: lteMeasSetup})},
			// Another subscription's short connection in the same log.
			{channel: diag.ChannelULCCCH, summary: Summary{Message: "rrcConnectionRequest"}},
			{summary: Summary{Message: "rrcConnectionRelease"}, want: released(serving)},
			{summary: lteReconf(Summary{MeasConfig: &MeasConfigDelta{
				Objects: []MeasObject{{ID: 3, RAT: diag.RATLTE, Carrier: 1850}},
				Reports: []ReportConfig{{ID: 4, Event: diag.EventA5}},
				MeasIDs: []MeasIDLink{{ID: 4, Object: 3, Report: 4}},
			}})},
			{summary: lteReport(1, NeighborCell{RAT: diag.RATLTE, PCI: 201}), want: []diag.Event{
				{Type: diag.TypeMeasReport, Meas: diag.EventA3, Serving: serving, Neighbor: lteCell(201, 1300)}}},
			{summary: lteReport(4, NeighborCell{RAT: diag.RATLTE, PCI: 7}), want: []diag.Event{
				{Type: diag.TypeMeasReport, Meas: diag.EventA5, Serving: serving, Neighbor: lteCell(7, 1850)}}},
		}},
		{"a new connection without measConfig resolves nothing of the released one", []step{
			{rat: diag.RATNR, cell: cellRef(nrCell(433, 640704)), summary: Summary{Message: "rrcReconfiguration", MeasConfig: &MeasConfigDelta{
				Objects: []MeasObject{{ID: 1, RAT: diag.RATNR, Carrier: 640704}},
				Reports: []ReportConfig{{ID: 1, Event: diag.EventA3}},
				MeasIDs: []MeasIDLink{{ID: 1, Object: 1, Report: 1}},
			}}},
			{rat: diag.RATNR, cell: cellRef(nrCell(433, 640704)), summary: Summary{Message: "rrcRelease"}, want: released(nrCell(433, 640704))},
			{rat: diag.RATNR, channel: diag.ChannelULDCCH, cell: cellRef(nrCell(433, 640704)),
				summary: Summary{Message: "measurementReport", Report: &MeasReport{MeasID: 2}}, wantErr: ErrUnresolvedMeasID},
		}},
		{"an NR resume brings its own measConfig", []step{
			{rat: diag.RATNR, cell: cellRef(nrCell(433, 640704)), summary: Summary{Message: "rrcReconfiguration", MeasConfig: &MeasConfigDelta{
				Objects: []MeasObject{{ID: 1, RAT: diag.RATNR, Carrier: 640704}},
				Reports: []ReportConfig{{ID: 1, Event: diag.EventA3}},
				MeasIDs: []MeasIDLink{{ID: 1, Object: 1, Report: 1}},
			}}},
			{rat: diag.RATNR, cell: cellRef(nrCell(433, 640704)), summary: Summary{Message: "rrcResume", MeasConfig: &MeasConfigDelta{
				Objects: []MeasObject{{ID: 2, RAT: diag.RATNR, Carrier: 640704}},
				Reports: []ReportConfig{{ID: 2, Event: diag.EventA5}},
				MeasIDs: []MeasIDLink{{ID: 1, Object: 2, Report: 2}},
			}}},
			{rat: diag.RATNR, channel: diag.ChannelULDCCH, cell: cellRef(nrCell(433, 640704)),
				summary: Summary{Message: "measurementReport", Report: &MeasReport{MeasID: 1, Neighbors: []NeighborCell{{RAT: diag.RATNR, PCI: 434}}}},
				want:    []diag.Event{{Type: diag.TypeMeasReport, Meas: diag.EventA5, Serving: nrCell(433, 640704), Neighbor: nrCell(434, 640704)}}},
		}},
		{"primary cell handover and its completion", []step{
			{summary: lteReconf(Summary{Sync: &SyncTarget{PCI: 300, HasPCI: true, Carrier: 1850}}), want: []diag.Event{
				{Type: diag.TypeHOCommand, Kind: diag.HOPCell, Source: serving, Target: lteCell(300, 1850)}}},
			{summary: lteComplete, want: []diag.Event{{Type: diag.TypeHOComplete, Cell: lteCell(300, 1850)}}},
			{summary: lteComplete},
			{summary: lteReconf(Summary{Sync: &SyncTarget{PCI: 301, HasPCI: true}}), want: []diag.Event{
				{Type: diag.TypeHOCommand, Kind: diag.HOPCell, Source: serving, Target: lteCell(301, 1300)}}},
		}},
		{"measIds follow an inter-frequency handover", []step{
			{summary: lteReconf(Summary{MeasConfig: &MeasConfigDelta{
				Objects: []MeasObject{{ID: 1, RAT: diag.RATLTE, Carrier: 1300}, {ID: 3, RAT: diag.RATLTE, Carrier: 1850}},
				Reports: []ReportConfig{{ID: 1, Event: diag.EventA3}, {ID: 2, Event: diag.EventA5}},
				MeasIDs: []MeasIDLink{{ID: 1, Object: 1, Report: 1}, {ID: 4, Object: 3, Report: 2}},
			}})},
			{summary: lteReconf(Summary{Sync: &SyncTarget{PCI: 300, HasPCI: true, Carrier: 1850}}), want: []diag.Event{
				{Type: diag.TypeHOCommand, Kind: diag.HOPCell, Source: serving, Target: lteCell(300, 1850)}}},
			{cell: cellRef(lteCell(300, 1850)), summary: lteReport(1, NeighborCell{RAT: diag.RATLTE, PCI: 301}), want: []diag.Event{
				{Type: diag.TypeMeasReport, Meas: diag.EventA3, Serving: lteCell(300, 1850), Neighbor: lteCell(301, 1850)}}},
			{cell: cellRef(lteCell(300, 1850)), summary: lteReport(4, NeighborCell{RAT: diag.RATLTE, PCI: 10}), want: []diag.Event{
				{Type: diag.TypeMeasReport, Meas: diag.EventA5, Serving: lteCell(300, 1850), Neighbor: serving}}},
		}},
		{"measIds of the source carrier go after a handover to an unmeasured carrier", []step{
			{summary: lteReconf(Summary{MeasConfig: lteMeasSetup})},
			{summary: lteReconf(Summary{Sync: &SyncTarget{PCI: 300, HasPCI: true, Carrier: 1850}}), want: []diag.Event{
				{Type: diag.TypeHOCommand, Kind: diag.HOPCell, Source: serving, Target: lteCell(300, 1850)}}},
			{summary: lteReport(1), wantErr: ErrUnresolvedMeasID},
			{summary: lteReport(2, NeighborCell{RAT: diag.RATNR, PCI: 55}), want: []diag.Event{
				{Type: diag.TypeMeasReport, Meas: diag.EventB1, Serving: serving, Neighbor: nrCell(55, 2079167)}}},
		}},
		{"transport without cell: serving follows completed handovers", []step{
			{summary: lteReconf(Summary{MeasConfig: lteMeasSetup})},
			{cell: noCell, summary: lteReconf(Summary{Sync: &SyncTarget{PCI: 300, HasPCI: true, Carrier: 1850}}), want: []diag.Event{
				{Type: diag.TypeHOCommand, Kind: diag.HOPCell, Source: serving, Target: lteCell(300, 1850)}}},
			{cell: noCell, summary: lteComplete, want: []diag.Event{{Type: diag.TypeHOComplete, Cell: lteCell(300, 1850)}}},
			{cell: noCell, summary: lteReport(2), want: []diag.Event{
				{Type: diag.TypeMeasReport, Meas: diag.EventB1, Serving: lteCell(300, 1850)}}},
		}},
		{"EN-DC addition, change and release", []step{
			{summary: lteReconf(Summary{ENDC: scgContainer([]byte{1}, 625, 504990)}), want: []diag.Event{
				{Type: diag.TypeHOCommand, Kind: diag.HOSCGAdd, Target: scgA}}},
			{summary: lteComplete, want: []diag.Event{{Type: diag.TypeHOComplete, Cell: scgA}}},
			{summary: lteReconf(Summary{ENDC: scgContainer([]byte{2}, 626, 504990)}), want: []diag.Event{
				{Type: diag.TypeHOCommand, Kind: diag.HOSCGChange, Source: scgA, Target: scgB}}},
			{summary: lteReconf(Summary{ENDC: &ENDCConfig{Release: true}}), want: []diag.Event{
				{Type: diag.TypeHOCommand, Kind: diag.HOSCGRelease, Source: scgB, Target: serving}}},
			{summary: lteReconf(Summary{ENDC: &ENDCConfig{Release: true}})},
		}},
		{"EN-DC release-and-add", []step{
			{summary: lteReconf(Summary{ENDC: scgContainer([]byte{1}, 625, 504990)}), want: []diag.Event{
				{Type: diag.TypeHOCommand, Kind: diag.HOSCGAdd, Target: scgA}}},
			{summary: lteReconf(Summary{ENDC: func() *ENDCConfig {
				c := scgContainer([]byte{2}, 626, 504990)
				c.ReleaseAndAdd = true
				return c
			}()}), want: []diag.Event{
				{Type: diag.TypeHOCommand, Kind: diag.HOSCGRelease, Source: scgA, Target: serving},
				{Type: diag.TypeHOCommand, Kind: diag.HOSCGAdd, Target: scgB}}},
		}},
		{"SCG reconfiguration logged on its own after its container counts once", []step{
			{summary: lteReconf(Summary{ENDC: scgContainer([]byte{7, 7}, 625, 504990)}), want: []diag.Event{
				{Type: diag.TypeHOCommand, Kind: diag.HOSCGAdd, Target: scgA}}},
			{rat: diag.RATNR, channel: diag.ChannelRRCReconfiguration, pdu: []byte{7, 7}, cell: cellRef(scgA),
				summary: Summary{Message: "rrcReconfiguration", SecondarySync: &SyncTarget{PCI: 625, HasPCI: true, Carrier: 504990}}},
		}},
		{"SCG reconfiguration logged on its own before its container counts once", []step{
			{rat: diag.RATNR, channel: diag.ChannelRRCReconfiguration, pdu: []byte{7, 7}, cell: noCell,
				summary: Summary{Message: "rrcReconfiguration", SecondarySync: &SyncTarget{PCI: 625, HasPCI: true, Carrier: 504990}},
				want:    []diag.Event{{Type: diag.TypeHOCommand, Kind: diag.HOSCGAdd, Target: scgA}}},
			{summary: lteReconf(Summary{ENDC: scgContainer([]byte{7, 7}, 625, 504990)})},
			{rat: diag.RATNR, channel: diag.ChannelRRCReconfigurationComplete, cell: noCell,
				summary: Summary{Message: "rrcReconfigurationComplete"},
				want:    []diag.Event{{Type: diag.TypeHOComplete, Cell: scgA}}},
			{summary: lteComplete},
		}},
		{"anchor handover releasing the SCG names the new anchor as the release's target", []step{
			{summary: lteReconf(Summary{ENDC: scgContainer([]byte{1}, 625, 504990)}), want: []diag.Event{
				{Type: diag.TypeHOCommand, Kind: diag.HOSCGAdd, Target: scgA}}},
			{summary: lteComplete, want: []diag.Event{{Type: diag.TypeHOComplete, Cell: scgA}}},
			// The serving cell changes only at the completion: the
			// release must not name the anchor being left.
			{summary: lteReconf(Summary{Sync: &SyncTarget{PCI: 300, HasPCI: true, Carrier: 1850}, ENDC: &ENDCConfig{Release: true}}), want: []diag.Event{
				{Type: diag.TypeHOCommand, Kind: diag.HOPCell, Source: serving, Target: lteCell(300, 1850)},
				{Type: diag.TypeHOCommand, Kind: diag.HOSCGRelease, Source: scgA, Target: lteCell(300, 1850)}}},
			{summary: lteComplete, want: []diag.Event{{Type: diag.TypeHOComplete, Cell: lteCell(300, 1850)}}},
		}},
		{"anchor handover with an SCG release-and-add releases to the new anchor", []step{
			{summary: lteReconf(Summary{ENDC: scgContainer([]byte{1}, 625, 504990)}), want: []diag.Event{
				{Type: diag.TypeHOCommand, Kind: diag.HOSCGAdd, Target: scgA}}},
			{summary: lteReconf(Summary{Sync: &SyncTarget{PCI: 300, HasPCI: true, Carrier: 1850}, ENDC: func() *ENDCConfig {
				c := scgContainer([]byte{2}, 626, 504990)
				c.ReleaseAndAdd = true
				return c
			}()}), want: []diag.Event{
				{Type: diag.TypeHOCommand, Kind: diag.HOPCell, Source: serving, Target: lteCell(300, 1850)},
				{Type: diag.TypeHOCommand, Kind: diag.HOSCGRelease, Source: scgA, Target: lteCell(300, 1850)},
				{Type: diag.TypeHOCommand, Kind: diag.HOSCGAdd, Target: scgB}}},
		}},
		{"SCG re-added with the same bytes after a release is a new addition", []step{
			{summary: lteReconf(Summary{ENDC: scgContainer([]byte{9, 9}, 625, 504990)}), want: []diag.Event{
				{Type: diag.TypeHOCommand, Kind: diag.HOSCGAdd, Target: scgA}}},
			{summary: lteComplete, want: []diag.Event{{Type: diag.TypeHOComplete, Cell: scgA}}},
			{summary: lteReconf(Summary{ENDC: &ENDCConfig{Release: true}}), want: []diag.Event{
				{Type: diag.TypeHOCommand, Kind: diag.HOSCGRelease, Source: scgA, Target: serving}}},
			{summary: lteComplete},
			// A ping-pong at the cell edge: same C-RNTI, same
			// configuration, same bytes, a few ms after the release.
			{summary: lteReconf(Summary{ENDC: scgContainer([]byte{9, 9}, 625, 504990)}), want: []diag.Event{
				{Type: diag.TypeHOCommand, Kind: diag.HOSCGAdd, Target: scgA}}},
			{summary: lteComplete, want: []diag.Event{{Type: diag.TypeHOComplete, Cell: scgA}}},
		}},
		{"SCG re-added with the same bytes after a re-establishment is a new addition", []step{
			{summary: lteReconf(Summary{ENDC: scgContainer([]byte{9, 9}, 625, 504990)}), want: []diag.Event{
				{Type: diag.TypeHOCommand, Kind: diag.HOSCGAdd, Target: scgA}}},
			{summary: lteComplete, want: []diag.Event{{Type: diag.TypeHOComplete, Cell: scgA}}},
			{channel: diag.ChannelULCCCH, summary: Summary{Message: "rrcConnectionReestablishmentRequest", ReestablishmentCause: "otherFailure"},
				want: []diag.Event{{Type: diag.TypeHOFailure, Cause: diag.CauseRLF}}},
			{summary: lteReconf(Summary{ENDC: scgContainer([]byte{9, 9}, 625, 504990)}), want: []diag.Event{
				{Type: diag.TypeHOCommand, Kind: diag.HOSCGAdd, Target: scgA}}},
		}},
		{"the same SCG bytes well past the copies' spread are a new procedure", []step{
			{summary: lteReconf(Summary{ENDC: scgContainer([]byte{9, 9}, 625, 504990)}), want: []diag.Event{
				{Type: diag.TypeHOCommand, Kind: diag.HOSCGAdd, Target: scgA}}},
			{after: 40 * time.Millisecond, summary: lteComplete, want: []diag.Event{{Type: diag.TypeHOComplete, Cell: scgA}}},
			// Without a release the decoder saw (a connection release and
			// setup the log missed), the network syncs the SCG again.
			{after: time.Second, summary: lteReconf(Summary{ENDC: scgContainer([]byte{9, 9}, 625, 504990)}), want: []diag.Event{
				{Type: diag.TypeHOCommand, Kind: diag.HOSCGChange, Source: scgA, Target: scgA}}},
		}},
		{"the copy of a release-and-add's SCG reconfiguration still counts once", []step{
			{summary: lteReconf(Summary{ENDC: scgContainer([]byte{1}, 625, 504990)}), want: []diag.Event{
				{Type: diag.TypeHOCommand, Kind: diag.HOSCGAdd, Target: scgA}}},
			{summary: lteReconf(Summary{ENDC: func() *ENDCConfig {
				c := scgContainer([]byte{2}, 626, 504990)
				c.ReleaseAndAdd = true
				return c
			}()}), want: []diag.Event{
				{Type: diag.TypeHOCommand, Kind: diag.HOSCGRelease, Source: scgA, Target: serving},
				{Type: diag.TypeHOCommand, Kind: diag.HOSCGAdd, Target: scgB}}},
			{rat: diag.RATNR, channel: diag.ChannelRRCReconfiguration, pdu: []byte{2}, cell: cellRef(scgB),
				summary: Summary{Message: "rrcReconfiguration", SecondarySync: &SyncTarget{PCI: 626, HasPCI: true, Carrier: 504990}}},
		}},
		{"EN-DC NR report relayed by LTE resolves through the NR measConfig", []step{
			{summary: lteReconf(Summary{ENDC: &ENDCConfig{nested: []byte{3}, SecondaryCellGroup: &Summary{
				Message: "rrcReconfiguration",
				MeasConfig: &MeasConfigDelta{
					Objects: []MeasObject{{ID: 1, RAT: diag.RATNR, Carrier: 504990}},
					Reports: []ReportConfig{{ID: 2, Event: diag.EventA3}},
					MeasIDs: []MeasIDLink{{ID: 2, Object: 1, Report: 2}},
				},
				SecondarySync: &SyncTarget{PCI: 625, HasPCI: true, Carrier: 504990},
			}}}), want: []diag.Event{{Type: diag.TypeHOCommand, Kind: diag.HOSCGAdd, Target: scgA}}},
			{summary: Summary{Message: "ulInformationTransferMRDC-r15", NestedNR: &Summary{
				Message: "measurementReport",
				Report:  &MeasReport{MeasID: 2, Neighbors: []NeighborCell{{RAT: diag.RATNR, PCI: 626}}},
			}}, want: []diag.Event{{Type: diag.TypeMeasReport, Meas: diag.EventA3, Serving: scgA, Neighbor: scgB}}},
		}},
		{"NR primary cell handover to mmWave", []step{
			{rat: diag.RATNR, channel: diag.ChannelDLDCCH, cell: cellRef(nrCell(433, 640704)),
				summary: Summary{Message: "rrcReconfiguration", Sync: &SyncTarget{PCI: 77, HasPCI: true, Carrier: 2079167}},
				want: []diag.Event{{Type: diag.TypeHOCommand, Kind: diag.HOPCell, Source: nrCell(433, 640704),
					Target: diag.Cell{RAT: diag.RATNR, Band: diag.BandMmWave, PCI: 77, ARFCN: 2079167}}}},
			{rat: diag.RATNR, channel: diag.ChannelULDCCH, cell: cellRef(nrCell(433, 640704)),
				summary: Summary{Message: "rrcReconfigurationComplete"},
				want:    []diag.Event{{Type: diag.TypeHOComplete, Cell: nrCell(77, 2079167)}}},
		}},
		{"re-establishment abandons the pending handover and the SCG", []step{
			{summary: lteReconf(Summary{ENDC: scgContainer([]byte{1}, 625, 504990)}), want: []diag.Event{
				{Type: diag.TypeHOCommand, Kind: diag.HOSCGAdd, Target: scgA}}},
			{channel: diag.ChannelULCCCH, summary: Summary{Message: "rrcConnectionReestablishmentRequest", ReestablishmentCause: "otherFailure"},
				want: []diag.Event{{Type: diag.TypeHOFailure, Cause: diag.CauseRLF}}},
			{summary: lteComplete},
			{summary: lteReconf(Summary{ENDC: scgContainer([]byte{2}, 626, 504990)}), want: []diag.Event{
				{Type: diag.TypeHOCommand, Kind: diag.HOSCGAdd, Target: scgB}}},
		}},
		{"a connection release ends the SCG: the next connection adds one", []step{
			{summary: lteReconf(Summary{ENDC: scgContainer([]byte{1}, 625, 504990)}), want: []diag.Event{
				{Type: diag.TypeHOCommand, Kind: diag.HOSCGAdd, Target: scgA}}},
			{summary: lteComplete, want: []diag.Event{{Type: diag.TypeHOComplete, Cell: scgA}}},
			{summary: Summary{Message: "rrcConnectionRelease"}, want: released(serving)},
			{channel: diag.ChannelULCCCH, summary: Summary{Message: "rrcConnectionRequest"}},
			{channel: diag.ChannelULDCCH, summary: Summary{Message: "rrcConnectionSetupComplete"}},
			{summary: lteReconf(Summary{ENDC: scgContainer([]byte{2}, 625, 504990)}), want: []diag.Event{
				{Type: diag.TypeHOCommand, Kind: diag.HOSCGAdd, Target: scgA}}},
			{summary: lteComplete, want: []diag.Event{{Type: diag.TypeHOComplete, Cell: scgA}}},
			{summary: lteReconf(Summary{ENDC: scgContainer([]byte{3}, 626, 504990)}), want: []diag.Event{
				{Type: diag.TypeHOCommand, Kind: diag.HOSCGChange, Source: scgA, Target: scgB}}},
		}},
		{"a connection release ends the SCG: the next connection releases none", []step{
			{summary: lteReconf(Summary{ENDC: scgContainer([]byte{1}, 625, 504990)}), want: []diag.Event{
				{Type: diag.TypeHOCommand, Kind: diag.HOSCGAdd, Target: scgA}}},
			{summary: lteComplete, want: []diag.Event{{Type: diag.TypeHOComplete, Cell: scgA}}},
			{summary: Summary{Message: "rrcConnectionRelease"}, want: released(serving)},
			{channel: diag.ChannelULCCCH, summary: Summary{Message: "rrcConnectionRequest"}},
			{summary: lteReconf(Summary{ENDC: &ENDCConfig{Release: true}})},
			{summary: lteReconf(Summary{ENDC: func() *ENDCConfig {
				c := scgContainer([]byte{2}, 626, 504990)
				c.ReleaseAndAdd = true
				return c
			}()}), want: []diag.Event{{Type: diag.TypeHOCommand, Kind: diag.HOSCGAdd, Target: scgB}}},
		}},
		{"a connection request ends the SCG when the log missed the release", []step{
			{summary: lteReconf(Summary{ENDC: scgContainer([]byte{1}, 625, 504990)}), want: []diag.Event{
				{Type: diag.TypeHOCommand, Kind: diag.HOSCGAdd, Target: scgA}}},
			{summary: lteComplete, want: []diag.Event{{Type: diag.TypeHOComplete, Cell: scgA}}},
			{channel: diag.ChannelULCCCH, summary: Summary{Message: "rrcConnectionRequest"}},
			{channel: diag.ChannelULDCCH, summary: Summary{Message: "rrcConnectionSetupComplete"}},
			{summary: lteReconf(Summary{ENDC: scgContainer([]byte{2}, 626, 504990)}), want: []diag.Event{
				{Type: diag.TypeHOCommand, Kind: diag.HOSCGAdd, Target: scgB}}},
		}},
		{"an NR release ends the NR-DC SCG", []step{
			{rat: diag.RATNR, cell: cellRef(nrCell(433, 640704)),
				summary: Summary{Message: "rrcReconfiguration", SecondarySync: &SyncTarget{PCI: 625, HasPCI: true, Carrier: 504990}},
				want:    []diag.Event{{Type: diag.TypeHOCommand, Kind: diag.HOSCGAdd, Target: scgA}}},
			{rat: diag.RATNR, channel: diag.ChannelULDCCH, cell: cellRef(nrCell(433, 640704)),
				summary: Summary{Message: "rrcReconfigurationComplete"}, want: []diag.Event{{Type: diag.TypeHOComplete, Cell: scgA}}},
			{rat: diag.RATNR, cell: cellRef(nrCell(433, 640704)), summary: Summary{Message: "rrcRelease"}, want: released(nrCell(433, 640704))},
			{rat: diag.RATNR, channel: diag.ChannelULCCCH, cell: cellRef(nrCell(433, 640704)), summary: Summary{Message: "rrcSetupRequest"}},
			{rat: diag.RATNR, cell: cellRef(nrCell(433, 640704)),
				summary: Summary{Message: "rrcReconfiguration", SecondarySync: &SyncTarget{PCI: 625, HasPCI: true, Carrier: 504990}},
				want:    []diag.Event{{Type: diag.TypeHOCommand, Kind: diag.HOSCGAdd, Target: scgA}}},
		}},
		{"a handover awaiting its complete ends with the connection", []step{
			{summary: lteReconf(Summary{Sync: &SyncTarget{PCI: 300, HasPCI: true, Carrier: 1850}}), want: []diag.Event{
				{Type: diag.TypeHOCommand, Kind: diag.HOPCell, Source: serving, Target: lteCell(300, 1850)}}},
			// The complete was not logged; the connection ends.
			{summary: Summary{Message: "rrcConnectionRelease"}, want: released(serving)},
			{channel: diag.ChannelULCCCH, summary: Summary{Message: "rrcConnectionRequest"}},
			{channel: diag.ChannelULDCCH, summary: Summary{Message: "rrcConnectionSetupComplete"}},
			{summary: lteReconf(Summary{MeasConfig: lteMeasSetup})},
			{summary: lteComplete},
		}},
		{"an SCG reconfiguration awaiting its complete ends with the LTE connection", []step{
			{rat: diag.RATNR, channel: diag.ChannelRRCReconfiguration, pdu: []byte{7, 7}, cell: noCell,
				summary: Summary{Message: "rrcReconfiguration", SecondarySync: &SyncTarget{PCI: 625, HasPCI: true, Carrier: 504990}},
				want:    []diag.Event{{Type: diag.TypeHOCommand, Kind: diag.HOSCGAdd, Target: scgA}}},
			{summary: Summary{Message: "rrcConnectionRelease"}, want: released(serving)},
			{channel: diag.ChannelULCCCH, summary: Summary{Message: "rrcConnectionRequest"}},
			{rat: diag.RATNR, channel: diag.ChannelRRCReconfigurationComplete, cell: noCell,
				summary: Summary{Message: "rrcReconfigurationComplete"}},
		}},
		{"another subscription's connection in the same log leaves the SCG", []step{
			{summary: lteReconf(Summary{ENDC: scgContainer([]byte{1}, 625, 504990)}), want: []diag.Event{
				{Type: diag.TypeHOCommand, Kind: diag.HOSCGAdd, Target: scgA}}},
			{summary: lteComplete, want: []diag.Event{{Type: diag.TypeHOComplete, Cell: scgA}}},
			{channel: diag.ChannelULCCCH, summary: Summary{Message: "rrcConnectionRequest"}},
			{channel: diag.ChannelULDCCH, summary: Summary{Message: "rrcConnectionSetupComplete"}},
			{summary: Summary{Message: "rrcConnectionRelease"}, want: released(serving)},
			// Dedicated signalling with no request since the release:
			// the connection that goes on is the first one.
			{summary: lteReconf(Summary{ENDC: &ENDCConfig{Release: true}}), want: []diag.Event{
				{Type: diag.TypeHOCommand, Kind: diag.HOSCGRelease, Source: scgA, Target: serving}}},
		}},
		{"another subscription's SCG change is followed through its connection", []step{
			{summary: lteReconf(Summary{ENDC: scgContainer([]byte{1}, 625, 504990)}), want: []diag.Event{
				{Type: diag.TypeHOCommand, Kind: diag.HOSCGAdd, Target: scgA}}},
			{channel: diag.ChannelULCCCH, summary: Summary{Message: "rrcConnectionRequest"}},
			// The first connection changes its SCG during the other's,
			// from a cell the request left unknown.
			{summary: lteReconf(Summary{ENDC: scgContainer([]byte{2}, 626, 504990)}), want: []diag.Event{
				{Type: diag.TypeHOCommand, Kind: diag.HOSCGAdd, Target: scgB}}},
			{summary: Summary{Message: "rrcConnectionRelease"}, want: released(serving)},
			{channel: diag.ChannelULDCCH, summary: Summary{Message: "ulInformationTransfer"}},
			{summary: lteReconf(Summary{ENDC: &ENDCConfig{Release: true}}), want: []diag.Event{
				{Type: diag.TypeHOCommand, Kind: diag.HOSCGRelease, Source: scgB, Target: serving}}},
		}},
		{"a report of the configuration before an unlogged release brings the SCG back", []step{
			{summary: lteReconf(Summary{MeasConfig: lteMeasSetup, ENDC: scgContainer([]byte{1}, 625, 504990)}), want: []diag.Event{
				{Type: diag.TypeHOCommand, Kind: diag.HOSCGAdd, Target: scgA}}},
			// Another subscription's request; its release is not logged.
			{channel: diag.ChannelULCCCH, summary: Summary{Message: "rrcConnectionRequest"}},
			{channel: diag.ChannelULDCCH, summary: lteReport(1, NeighborCell{RAT: diag.RATLTE, PCI: 201}), want: []diag.Event{
				{Type: diag.TypeMeasReport, Meas: diag.EventA3, Serving: serving, Neighbor: lteCell(201, 1300)}}},
			{summary: lteReconf(Summary{ENDC: &ENDCConfig{Release: true}}), want: []diag.Event{
				{Type: diag.TypeHOCommand, Kind: diag.HOSCGRelease, Source: scgA, Target: serving}}},
		}},
		{"a release its request confirmed stays, whatever a report resolves", []step{
			{summary: lteReconf(Summary{MeasConfig: lteMeasSetup, ENDC: scgContainer([]byte{1}, 625, 504990)}), want: []diag.Event{
				{Type: diag.TypeHOCommand, Kind: diag.HOSCGAdd, Target: scgA}}},
			{summary: Summary{Message: "rrcConnectionRelease"}, want: released(serving)},
			{channel: diag.ChannelULCCCH, summary: Summary{Message: "rrcConnectionRequest"}},
			// The next connection's reconfiguration was not logged: its
			// report resolves through the released configuration.
			{channel: diag.ChannelULDCCH, summary: lteReport(1, NeighborCell{RAT: diag.RATLTE, PCI: 201}), want: []diag.Event{
				{Type: diag.TypeMeasReport, Meas: diag.EventA3, Serving: serving, Neighbor: lteCell(201, 1300)}}},
			{summary: lteReconf(Summary{ENDC: scgContainer([]byte{2}, 626, 504990)}), want: []diag.Event{
				{Type: diag.TypeHOCommand, Kind: diag.HOSCGAdd, Target: scgB}}},
		}},
		{"a complete from another cell that nothing awaited completes the handover of a command the log lost", []step{
			{summary: lteReconf(Summary{MeasConfig: twoCarriers})},
			{channel: diag.ChannelULDCCH, summary: lteComplete},
			{channel: diag.ChannelULDCCH, cell: cellRef(target), summary: lteComplete, want: []diag.Event{
				{Type: diag.TypeHOComplete, Cell: target}}},
			// The measIds followed the handover to the other carrier.
			{channel: diag.ChannelULDCCH, cell: cellRef(target), summary: lteReport(1, NeighborCell{RAT: diag.RATLTE, PCI: 301}), want: []diag.Event{
				{Type: diag.TypeMeasReport, Meas: diag.EventA3, Serving: target, Neighbor: lteCell(301, 1850)}}},
			{channel: diag.ChannelULDCCH, cell: cellRef(target), summary: lteReport(4, NeighborCell{RAT: diag.RATLTE, PCI: 10}), want: []diag.Event{
				{Type: diag.TypeMeasReport, Meas: diag.EventA5, Serving: target, Neighbor: serving}}},
		}},
		{"a complete from the serving cell is no handover", []step{
			{summary: lteReconf(Summary{MeasConfig: twoCarriers})},
			{channel: diag.ChannelULDCCH, summary: lteComplete},
			{channel: diag.ChannelULDCCH, summary: lteComplete},
		}},
		{"a complete answering a logged reconfiguration without mobility is no handover, whatever cell the log names", []step{
			{summary: lteReconf(Summary{MeasConfig: twoCarriers})},
			{channel: diag.ChannelULDCCH, summary: lteComplete},
			{summary: lteReconf(Summary{MeasConfig: &MeasConfigDelta{MeasIDsRemoved: []int{4}}})},
			{channel: diag.ChannelULDCCH, cell: cellRef(target), summary: lteComplete},
		}},
		{"a complete answering a logged handover command completes that handover once", []step{
			{summary: lteReconf(Summary{MeasConfig: twoCarriers})},
			{channel: diag.ChannelULDCCH, summary: lteComplete},
			{summary: lteReconf(Summary{Sync: &SyncTarget{PCI: 300, HasPCI: true, Carrier: 1850}}), want: []diag.Event{
				{Type: diag.TypeHOCommand, Kind: diag.HOPCell, Source: serving, Target: target}}},
			{channel: diag.ChannelULDCCH, cell: cellRef(target), summary: lteComplete, want: []diag.Event{
				{Type: diag.TypeHOComplete, Cell: target}}},
			{channel: diag.ChannelULDCCH, cell: cellRef(target), summary: lteComplete},
		}},
		{"a re-establishment is no handover: its first complete resumes the bearers", []step{
			{summary: lteReconf(Summary{MeasConfig: twoCarriers})},
			{channel: diag.ChannelULDCCH, summary: lteComplete},
			{channel: diag.ChannelULCCCH, cell: cellRef(target), summary: Summary{Message: "rrcConnectionReestablishmentRequest", ReestablishmentCause: "otherFailure"},
				want: []diag.Event{{Type: diag.TypeHOFailure, Cause: diag.CauseRLF}}},
			{channel: diag.ChannelULDCCH, cell: cellRef(target), summary: Summary{Message: "rrcConnectionReestablishmentComplete"}},
			// The reconfiguration resuming SRB2 and the data bearers was
			// not logged: its complete is no handover, whatever cell the log
			// names; the next one may be.
			{channel: diag.ChannelULDCCH, cell: cellRef(lteCell(301, 1850)), summary: lteComplete},
			{channel: diag.ChannelULDCCH, cell: cellRef(lteCell(302, 1850)), summary: lteComplete, want: []diag.Event{
				{Type: diag.TypeHOComplete, Cell: lteCell(302, 1850)}}},
		}},
		{"a new connection's first complete is no handover", []step{
			{channel: diag.ChannelULCCCH, summary: Summary{Message: "rrcConnectionRequest"}},
			{channel: diag.ChannelULDCCH, summary: Summary{Message: "rrcConnectionSetupComplete"}},
			// Another subscription's connection, the subscription lost by
			// the transport, or this one's first reconfiguration lost.
			{channel: diag.ChannelULDCCH, cell: cellRef(target), summary: lteComplete},
		}},
		{"a complete after a release, after a silence or naming no cell says nothing", []step{
			{summary: lteReconf(Summary{MeasConfig: twoCarriers})},
			{channel: diag.ChannelULDCCH, summary: lteComplete},
			{summary: Summary{Message: "rrcConnectionRelease"}, want: released(serving)},
			{channel: diag.ChannelULDCCH, cell: cellRef(target), summary: lteComplete},
			{after: 2 * time.Minute, channel: diag.ChannelULDCCH, summary: lteComplete},
			{after: 2*time.Minute + time.Millisecond, channel: diag.ChannelULDCCH, cell: noCell, summary: lteComplete},
		}},
		{"the copy of the NR complete an LTE complete carries, and a complete from the secondary cell, are no handover", []step{
			{summary: lteReconf(Summary{ENDC: scgContainer([]byte{1}, 625, 504990)}), want: []diag.Event{
				{Type: diag.TypeHOCommand, Kind: diag.HOSCGAdd, Target: scgA}}},
			{rat: diag.RATNR, channel: diag.ChannelRRCReconfigurationComplete, cell: cellRef(scgA), summary: Summary{Message: "rrcReconfigurationComplete"}},
			{channel: diag.ChannelULDCCH, summary: lteComplete, want: []diag.Event{{Type: diag.TypeHOComplete, Cell: scgA}}},
			{rat: diag.RATNR, channel: diag.ChannelRRCReconfigurationComplete, cell: cellRef(scgB), summary: Summary{Message: "rrcReconfigurationComplete"}},
			// A complete on SRB3 from the secondary cell, while NR messages
			// last named another cell.
			{rat: diag.RATNR, channel: diag.ChannelULDCCH, cell: cellRef(scgA), summary: Summary{Message: "rrcReconfigurationComplete"}},
		}},
		{"an anchor handover whose LTE reconfiguration the log lost but not its NR part completes its SCG change only", []step{
			{summary: lteReconf(Summary{ENDC: scgContainer([]byte{1}, 625, 504990)}), want: []diag.Event{
				{Type: diag.TypeHOCommand, Kind: diag.HOSCGAdd, Target: scgA}}},
			{channel: diag.ChannelULDCCH, summary: lteComplete, want: []diag.Event{{Type: diag.TypeHOComplete, Cell: scgA}}},
			{after: time.Second, rat: diag.RATNR, channel: diag.ChannelRRCReconfiguration, pdu: []byte{2}, cell: cellRef(scgA),
				summary: Summary{Message: "rrcReconfiguration", SecondarySync: &SyncTarget{PCI: 625, HasPCI: true, Carrier: 504990}},
				want:    []diag.Event{{Type: diag.TypeHOCommand, Kind: diag.HOSCGChange, Source: scgA, Target: scgA}}},
			{after: time.Second + 20*time.Millisecond, rat: diag.RATNR, channel: diag.ChannelRRCReconfigurationComplete, cell: cellRef(scgA),
				summary: Summary{Message: "rrcReconfigurationComplete"}, want: []diag.Event{{Type: diag.TypeHOComplete, Cell: scgA}}},
			{after: time.Second + 20*time.Millisecond, channel: diag.ChannelULDCCH, cell: cellRef(target), summary: lteComplete},
		}},
		{"NR: a complete from another cell that nothing awaited completes the handover of a command the log lost", []step{
			{rat: diag.RATNR, cell: cellRef(nrCell(433, 640704)), summary: Summary{Message: "rrcReconfiguration"}},
			{rat: diag.RATNR, channel: diag.ChannelULDCCH, cell: cellRef(nrCell(433, 640704)), summary: Summary{Message: "rrcReconfigurationComplete"}},
			{rat: diag.RATNR, channel: diag.ChannelULDCCH, cell: cellRef(nrCell(434, 640704)), summary: Summary{Message: "rrcReconfigurationComplete"},
				want: []diag.Event{{Type: diag.TypeHOComplete, Cell: nrCell(434, 640704)}}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := NewDecoder(slog.New(slog.DiscardHandler))
			for i, st := range tt.steps {
				msg := diag.RRCMessage{Time: t0.Add(time.Duration(i) * time.Millisecond), RAT: st.rat, Channel: st.channel,
					PCI: serving.PCI, ARFCN: serving.ARFCN, PDU: st.pdu}
				if st.after != 0 {
					msg.Time = t0.Add(st.after)
				}
				if msg.RAT == "" {
					msg.RAT = diag.RATLTE
				}
				if msg.Channel == diag.ChannelUnknown {
					msg.Channel = diag.ChannelDLDCCH
				}
				if st.cell != nil {
					msg.PCI, msg.ARFCN = st.cell.PCI, st.cell.ARFCN
				}
				summary := st.summary
				events, err := d.handle(msg, &summary)
				if st.wantErr != nil {
					assert.ErrorIs(t, err, st.wantErr, "step %d", i)
					continue
				}
				require.NoError(t, err, "step %d", i)
				for j := range st.want {
					st.want[j].Time = msg.Time
				}
				assert.Equal(t, st.want, events, "step %d", i)
			}
		})
	}
}

func TestFailureCause(t *testing.T) {
	tests := []struct {
		enumerant string
		want      diag.FailureCause
	}{
		{"otherFailure", diag.CauseRLF},
		{"handoverFailure", diag.CauseHOF},
		{"reconfigurationFailure", diag.CauseReestablishment},
		{"spare1", diag.CauseReestablishment},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, failureCause(tt.enumerant), tt.enumerant)
	}
}

func TestEventOf(t *testing.T) {
	tests := []struct {
		alternative string
		want        diag.MeasEvent
	}{
		{"eventA1", diag.EventA1}, {"eventA3", diag.EventA3}, {"eventA6-r10", diag.EventA6},
		{"eventB1", diag.EventB1}, {"eventB2-NR-r15", diag.EventB2}, {"eventB1-NR-r15", diag.EventB1},
		{"eventC1-r12", ""}, {"eventA3H1-r18", ""}, {"eventH1-r15", ""}, {"periodical", ""}, {"", ""},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, eventOf(tt.alternative), tt.alternative)
	}
}

// TestDecodeVectors runs committed PDUs end to end through Decode.
func TestDecodeVectors(t *testing.T) {
	tests := []struct {
		vector string
		want   []diag.Event
	}{
		{"lte_reestablishment_rlf", []diag.Event{{Type: diag.TypeHOFailure, Cause: diag.CauseRLF}}},
		{"lte_reestablishment_hof", []diag.Event{{Type: diag.TypeHOFailure, Cause: diag.CauseHOF}}},
		{"lte_reestablishment_reconf", []diag.Event{{Type: diag.TypeHOFailure, Cause: diag.CauseReestablishment}}},
		{"nr_reestablishment_rlf", []diag.Event{{Type: diag.TypeHOFailure, Cause: diag.CauseRLF}}},
		{"nr_reestablishment_hof", []diag.Event{{Type: diag.TypeHOFailure, Cause: diag.CauseHOF}}},
		{"nr_reestablishment_reconf", []diag.Event{{Type: diag.TypeHOFailure, Cause: diag.CauseReestablishment}}},
		{"nr_dl_reconf_pcell_mmwave", []diag.Event{{Type: diag.TypeHOCommand, Kind: diag.HOPCell,
			Source: nrCell(433, 640704), Target: nrCell(77, 2079167)}}},
		{"lte_reconf_scg_add", []diag.Event{{Type: diag.TypeHOCommand, Kind: diag.HOSCGAdd, Target: nrCell(625, 504990)}}},
		{"lte_reconf_ho_earfcn_ext", []diag.Event{{Type: diag.TypeHOCommand, Kind: diag.HOPCell,
			Source: lteCell(10, 1300), Target: lteCell(390, 66786)}}},
		{"nr_rrc_reconfiguration_scg", []diag.Event{{Type: diag.TypeHOCommand, Kind: diag.HOSCGAdd, Target: nrCell(625, 504990)}}},
		{"lte_reconf_complete", nil},
		{"lte_release_redirect_nr", []diag.Event{{Type: diag.TypeRRCRelease, Cell: lteCell(10, 1300),
			Redirect: diag.Carrier{RAT: diag.RATNR, ARFCN: 632628}}}},
		// The EARFCN is in the v9e0 extension, which is not read: no
		// carrier rather than 65535.
		{"lte_release_redirect_earfcn_ext", []diag.Event{{Type: diag.TypeRRCRelease, Cell: lteCell(10, 1300)}}},
		{"nr_release_redirect_eutra", []diag.Event{{Type: diag.TypeRRCRelease, Cell: nrCell(433, 640704),
			Redirect: diag.Carrier{RAT: diag.RATLTE, ARFCN: 1300}}}},
		// A suspension to RRC_INACTIVE leaves RRC_CONNECTED as a release does.
		{"nr_release_suspend", []diag.Event{{Type: diag.TypeRRCRelease, Cell: nrCell(433, 640704),
			Redirect: diag.Carrier{RAT: diag.RATNR, ARFCN: 2079167}}}},
	}
	for _, tt := range tests {
		t.Run(tt.vector, func(t *testing.T) {
			msg := vectorByName(t, tt.vector)
			msg.Time = t0
			msg.PCI, msg.ARFCN = 10, 1300
			if msg.RAT == diag.RATNR {
				msg.PCI, msg.ARFCN = 433, 640704
			}
			events, err := NewDecoder(nil).Decode(msg)
			require.NoError(t, err)
			for i := range tt.want {
				tt.want[i].Time = t0
			}
			assert.Equal(t, tt.want, events)
		})
	}
}

// TestDecodeRejects checks that malformed input is an error with a
// stable reason, never a panic, and that channels m2ho does not use are
// ignored without error.
func TestDecodeRejects(t *testing.T) {
	scg := vectorByName(t, "lte_reconf_scg_add")
	tests := []struct {
		name   string
		msg    diag.RRCMessage
		reason string
	}{
		{"truncated reconfiguration", diag.RRCMessage{RAT: diag.RATLTE, Channel: diag.ChannelDLDCCH, PDU: scg.PDU[:len(scg.PDU)/2]}, ReasonMalformed},
		{"empty PDU", diag.RRCMessage{RAT: diag.RATNR, Channel: diag.ChannelULDCCH}, ReasonMalformed},
		{"PDU over the maximum size", diag.RRCMessage{RAT: diag.RATNR, Channel: diag.ChannelULDCCH, PDU: make([]byte, MaxPDULen+1)}, ReasonMalformed},
		{"unknown RAT", diag.RRCMessage{RAT: "umts", Channel: diag.ChannelDLDCCH, PDU: []byte{0}}, ReasonMalformed},
		{"unconfigured measId", vectorByName(t, "lte_mr_a3"), ReasonUnresolvedMeasID},
		{"truncated system information", diag.RRCMessage{RAT: diag.RATLTE, Channel: diag.ChannelBCCHDLSCH, PDU: []byte{0}}, ReasonMalformed},
		{"master information is ignored", diag.RRCMessage{RAT: diag.RATLTE, Channel: diag.ChannelBCCHBCH, PDU: []byte{0}}, ""},
		{"LTE has no bare RRCReconfiguration", diag.RRCMessage{RAT: diag.RATLTE, Channel: diag.ChannelRRCReconfiguration, PDU: []byte{0}}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			events, err := NewDecoder(nil).Decode(tt.msg)
			assert.Empty(t, events)
			if tt.reason == "" {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Equal(t, tt.reason, diag.ErrorReason(err, ""))
		})
	}
}

// TestDecodeVectorSequences decodes committed PDUs in order and checks
// the events of the last one, resolved through what came before.
func TestDecodeVectorSequences(t *testing.T) {
	serving := lteCell(10, 1300)
	tests := []struct {
		name    string
		vectors []string
		want    []diag.Event
	}{
		{"measId 40 on measurement object 33 (extended lists)",
			[]string{"lte_reconf_meas_ext", "lte_mr_meas_id_ext"},
			[]diag.Event{{Type: diag.TypeMeasReport, Meas: diag.EventA3, Serving: serving, Neighbor: lteCell(133, 41134)}}},
		{"real A3 report resolved through the real measConfig",
			[]string{"lte_reconf_measconfig_a3", "lte_mr_a3"},
			[]diag.Event{{Type: diag.TypeMeasReport, Meas: diag.EventA3, Serving: serving, Neighbor: lteCell(133, 38950)}}},
		{"real EN-DC NR A3 report relayed by LTE",
			[]string{"lte_reconf_endc_measconfig", "lte_mrdc_nr_mr_a3"},
			[]diag.Event{{Type: diag.TypeMeasReport, Meas: diag.EventA3, Serving: nrCell(283, 504990), Neighbor: nrCell(625, 504990)}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := NewDecoder(nil)
			var events []diag.Event
			for _, name := range tt.vectors {
				msg := vectorByName(t, name)
				msg.Time, msg.PCI, msg.ARFCN = t0, serving.PCI, serving.ARFCN
				var err error
				events, err = d.Decode(msg)
				require.NoError(t, err, name)
			}
			for i := range tt.want {
				tt.want[i].Time = t0
			}
			assert.Equal(t, tt.want, events)
		})
	}
}

// TestLostCommandVectors decodes committed PDUs end to end: a
// reconfiguration complete the UE sent from another cell than its
// serving one, while no reconfiguration the log holds awaited one,
// completes a handover to that cell whose command the log lost; a
// complete from the serving cell, one answering a logged reconfiguration
// with or without a handover, a connection's first after a
// re-establishment and the copy of an EN-DC NR complete do not.
func TestLostCommandVectors(t *testing.T) {
	lteServing, lteNext, lteThird := lteCell(10, 1300), lteCell(11, 1300), lteCell(12, 1300)
	nrServing, nrNext, mmWave := nrCell(433, 640704), nrCell(434, 640704), nrCell(77, 2079167)
	lteHO := vectorByName(t, "lte_reconf_ho")
	stored, err := Summarize(lteHO.RAT, lteHO.Channel, lteHO.PDU)
	require.NoError(t, err)
	lteTarget := syncCell(diag.RATLTE, stored.Sync, lteServing)
	completed := func(c diag.Cell) []diag.Event { return []diag.Event{{Type: diag.TypeHOComplete, Cell: c}} }
	commanded := func(source, target diag.Cell) []diag.Event {
		return []diag.Event{{Type: diag.TypeHOCommand, Kind: diag.HOPCell, Source: source, Target: target}}
	}
	lteUp := []choStep{{vector: "lte_reconf_measconfig_a3", from: lteServing}, {vector: "lte_reconf_complete", from: lteServing}}
	nrUp := []choStep{{vector: "nr_dl_reconf_plain", from: nrServing}, {vector: "nr_ul_reconf_complete", from: nrServing}}
	tests := []struct {
		name  string
		steps []choStep
	}{
		{"LTE: from another cell, nothing awaited", append(slices.Clone(lteUp),
			choStep{vector: "lte_reconf_complete", from: lteNext, want: completed(lteNext)},
			choStep{vector: "lte_reconf_complete", from: lteNext})},
		{"LTE: answering a logged reconfiguration", append(slices.Clone(lteUp),
			choStep{vector: "lte_reconf_measconfig_a3", from: lteServing},
			choStep{vector: "lte_reconf_complete", from: lteNext})},
		{"LTE: answering a logged handover command", append(slices.Clone(lteUp),
			choStep{vector: "lte_reconf_ho", from: lteServing, want: commanded(lteServing, lteTarget)},
			choStep{vector: "lte_reconf_complete", from: lteTarget, want: completed(lteTarget)},
			choStep{vector: "lte_reconf_complete", from: lteTarget})},
		{"LTE: after a re-establishment", append(slices.Clone(lteUp),
			choStep{vector: "lte_reestablishment_rlf", from: lteNext, want: []diag.Event{{Type: diag.TypeHOFailure, Cause: diag.CauseRLF}}},
			choStep{vector: "lte_reest_complete", from: lteNext},
			choStep{vector: "lte_reconf_complete", from: lteNext},
			choStep{vector: "lte_reconf_complete", from: lteThird, want: completed(lteThird)})},
		{"NR: from another cell, nothing awaited", append(slices.Clone(nrUp),
			choStep{vector: "nr_ul_reconf_complete", from: nrNext, want: completed(nrNext)})},
		{"NR: answering a logged reconfiguration without reconfigurationWithSync", append(slices.Clone(nrUp),
			choStep{vector: "nr_dl_reconf_plain", from: nrServing},
			choStep{vector: "nr_ul_reconf_complete", from: nrNext})},
		{"NR: answering a logged reconfigurationWithSync", append(slices.Clone(nrUp),
			choStep{vector: "nr_dl_reconf_pcell_mmwave", from: nrServing, want: commanded(nrServing, mmWave)},
			choStep{vector: "nr_ul_reconf_complete", from: mmWave, want: completed(mmWave)},
			choStep{vector: "nr_ul_reconf_complete", from: mmWave})},
		{"NR: the copy of the complete an LTE complete carries", append(slices.Clone(nrUp),
			choStep{vector: "nr_rrc_reconfiguration_complete", from: nrNext})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { decodeSteps(t, tt.steps) })
	}
}

func TestDecoderObservesEveryReport(t *testing.T) {
	d := NewDecoder(slog.New(slog.DiscardHandler))
	var seen []ReportSeen
	d.ObserveReports(func(r ReportSeen) { seen = append(seen, r) })
	serving := lteCell(10, 1300)
	steps := []Summary{
		lteReconf(Summary{MeasConfig: lteMeasSetup}),
		lteReport(1, NeighborCell{RAT: diag.RATLTE, PCI: 201}),
		lteReport(3),
		lteReport(9),
		{Message: "ulInformationTransferMRDC-r15", NestedNR: &Summary{Message: "measurementReport", Report: &MeasReport{MeasID: 4}}},
	}
	for i, s := range steps {
		msg := diag.RRCMessage{Time: t0.Add(time.Duration(i) * time.Millisecond), RAT: diag.RATLTE, Channel: diag.ChannelULDCCH, PCI: serving.PCI, ARFCN: serving.ARFCN}
		_, _ = d.handle(msg, &s)
	}
	assert.Equal(t, []ReportSeen{
		{Time: t0.Add(time.Millisecond), RAT: diag.RATLTE, MeasID: 1, Resolved: true, Event: diag.EventA3},
		{Time: t0.Add(2 * time.Millisecond), RAT: diag.RATLTE, MeasID: 3, Resolved: true},
		{Time: t0.Add(3 * time.Millisecond), RAT: diag.RATLTE, MeasID: 9},
		{Time: t0.Add(4 * time.Millisecond), RAT: diag.RATNR, MeasID: 4},
	}, seen, "resolved, periodical, unresolved, and an EN-DC NR report")
}

// TestDecodeNetwork checks which network the decoder says the UE is in:
// the one a connection setup selects among the PLMNs of the SIB1 of its
// cell, never a SIB1 alone.
func TestDecodeNetwork(t *testing.T) {
	lte := func(vector string, pci uint16) diag.RRCMessage {
		msg := vectorByName(t, vector)
		msg.PCI, msg.ARFCN = pci, 1300
		return msg
	}
	nr := func(vector string) diag.RRCMessage {
		msg := vectorByName(t, vector)
		msg.PCI, msg.ARFCN = 433, 640704
		return msg
	}
	gsmtap := func(vector string) diag.RRCMessage {
		msg := vectorByName(t, vector)
		msg.PCIUnknown, msg.ARFCN = true, 1300
		return msg
	}
	network := func(plmn string, cell diag.Cell) []diag.Event {
		return []diag.Event{{Type: diag.TypeNetwork, PLMN: plmn, Cell: cell}}
	}
	tests := []struct {
		name string
		msgs []diag.RRCMessage
		// want are the events of the last message.
		want []diag.Event
		// network is what Network says after the last.
		network string
	}{
		{name: "a SIB1 alone says nothing", msgs: []diag.RRCMessage{lte("lte_sib1_shared", 10)}},
		{name: "the setup selects the second, whose mcc is the first's",
			msgs: []diag.RRCMessage{lte("lte_sib1_shared", 10), lte("lte_setup_complete_plmn2", 10)},
			want: network("460-01", lteCell(10, 1300)), network: "460-01"},
		{name: "the same network again is no event",
			msgs:    []diag.RRCMessage{lte("lte_sib1_shared", 10), lte("lte_setup_complete_plmn2", 10), lte("lte_sib1_shared", 10), lte("lte_setup_complete_plmn2", 10)},
			network: "460-01"},
		{name: "a setup without a SIB1 says nothing", msgs: []diag.RRCMessage{lte("lte_setup_complete_plmn2", 10)}},
		{name: "a setup in another cell than the SIB1's says nothing",
			msgs: []diag.RRCMessage{lte("lte_sib1_shared", 10), lte("lte_setup_complete_plmn2", 11)}},
		{name: "a SIB1 whose first identity has no mcc is left out",
			msgs: []diag.RRCMessage{lte("lte_sib1_shared", 10), lte("lte_sib1_no_mcc", 10), lte("lte_setup_complete_plmn2", 10)},
			want: network("460-01", lteCell(10, 1300)), network: "460-01"},
		{name: "NR selects among the PLMNs of NR's SIB1, not LTE's",
			msgs: []diag.RRCMessage{lte("lte_sib1_shared", 10), nr("nr_setup_complete_plmn3")}},
		{name: "GSMTAP names no cell",
			msgs: []diag.RRCMessage{gsmtap("lte_sib1_shared"), gsmtap("lte_setup_complete_plmn2")},
			want: network("460-01", diag.Cell{}), network: "460-01"},
		{name: "NR counts the identities across the entries",
			msgs: []diag.RRCMessage{nr("nr_sib1_shared"), nr("nr_setup_complete_plmn3")},
			want: network("310-410", nrCell(433, 640704)), network: "310-410"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := NewDecoder(nil)
			var events []diag.Event
			for i, msg := range tt.msgs {
				msg.Time = t0.Add(time.Duration(i) * time.Second)
				var err error
				events, err = d.Decode(msg)
				require.NoError(t, err)
			}
			for i := range tt.want {
				tt.want[i].Time = t0.Add(time.Duration(len(tt.msgs)-1) * time.Second)
			}
			assert.Equal(t, tt.want, events)
			assert.Equal(t, tt.network, d.Network())
		})
	}
}
