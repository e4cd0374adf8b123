package diag_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/pkg/diag"
)

// rbAllocLine is an rb_alloc record as a DIAG bridge sends one: a
// handful of slots of an NR carrier.
const rbAllocLine = `{"v":1,"type":"rb_alloc","cell":{"rat":"nr","pci":1,"arfcn":632628},"slot_us":500,"slots":[[106,106],[106,106],[40,106],[0,106]]}`

// BenchmarkParseJSONRBAlloc decodes one rb_alloc record: the daemon's
// per-event cost on a router streaming slot allocations.
func BenchmarkParseJSONRBAlloc(b *testing.B) {
	line := []byte(rbAllocLine)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := diag.ParseJSON(line); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParseJSONMeasReport decodes a measurement report, which the
// rb_alloc decoder turns down first.
func BenchmarkParseJSONMeasReport(b *testing.B) {
	line := []byte(`{"v":1,"type":"meas_report","event":"A3","serving":{"rat":"nr","pci":1,"arfcn":632628},"neighbor":{"rat":"nr","pci":2,"arfcn":632628}}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := diag.ParseJSON(line); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkUDPSourceRBAlloc sends rb_alloc records over loopback UDP, one
// per datagram, and takes each event from the source before sending the
// next: the receive, decode and hand-over of one event.
func BenchmarkUDPSourceRBAlloc(b *testing.B) {
	src, conn := listenUDPDialed(b, nil)
	out := make(chan diag.Event, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, out) }()
	defer func() {
		cancel()
		require.ErrorIs(b, <-done, context.Canceled)
	}()
	line := []byte(rbAllocLine)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := conn.Write(line); err != nil {
			b.Fatal(err)
		}
		if ev := <-out; ev.Type != diag.TypeRBAlloc {
			b.Fatalf("got a %s event", ev.Type)
		}
	}
}

// BenchmarkUDPSourceRBAllocBatch sends datagrams of 25 rb_alloc records,
// as a DIAG bridge forwards a USB transfer's worth, and takes each
// datagram's events from RunBatches before sending the next: the
// receive, decode and hand-over of 25 events.
func BenchmarkUDPSourceRBAllocBatch(b *testing.B) {
	const batch = 25
	src, conn := listenUDPDialed(b, nil)
	out := make(chan []diag.Event, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.RunBatches(ctx, out) }()
	defer func() {
		cancel()
		require.ErrorIs(b, <-done, context.Canceled)
	}()
	datagram := []byte(strings.Repeat(rbAllocLine+"\n", batch))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := conn.Write(datagram); err != nil {
			b.Fatal(err)
		}
		if evs := <-out; len(evs) != batch {
			b.Fatalf("got %d events", len(evs))
		}
	}
}
