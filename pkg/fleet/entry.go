package fleet

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/pkg/estimator"
	"github.com/m2ho/m2ho/pkg/statemachine"
)

// entryVersion is written in every entry; a peer running a later format
// is skipped rather than misread. Fields added since (a report kind's
// carrier, the lead) are optional: a version 1 entry without them is
// still read, and a reader that does not know them ignores them.
const entryVersion = 1

// maxValueSize bounds an entry: a well-formed one is a few hundred
// bytes, and the bucket refuses larger ones.
const maxValueSize = 4096

// maxReports bounds the trigger counts of an entry: a cell has a few
// kinds of report (trigger, measured band and carrier relation).
const maxReports = 64

// NameRE is what a network, host or bucket name may hold: it becomes a
// token of a KV key (or the bucket's stream name), where dots separate
// tokens and wildcards are forbidden.
var NameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// Reasons an entry of the bucket is skipped, the label of its counter.
const (
	// MalformedKey: a key of the network that does not name a cell and
	// a host.
	MalformedKey = "key"
	// MalformedDecode: the value is not a JSON entry.
	MalformedDecode = "decode"
	// MalformedSchema: an entry of another version, or whose cell is not
	// the one its key names.
	MalformedSchema = "schema"
	// MalformedValue: values no measurement gives (an empty or absurd
	// buffer, a time in the future, more commands than reports).
	MalformedValue = "value"
	// MalformedCapacity: a well-formed entry of a cell and host the cache
	// has no room for. No fleet has that many, but a peer flooding the
	// bucket with invented cells would otherwise grow m2hod's memory
	// without bound.
	MalformedCapacity = "capacity"
)

// MalformedReasons lists the reasons, for metrics that show zeros.
var MalformedReasons = []string{MalformedKey, MalformedDecode, MalformedSchema, MalformedValue, MalformedCapacity}

// DefaultMaxEntries bounds the peers' entries (one per cell and host)
// held in the cache: a thousand vehicles that each measured a hundred
// cells of one network, about 20 MB.
const DefaultMaxEntries = 100_000

// entry is what one host publishes about one cell.
type entry struct {
	Version     int       `json:"v"`
	RAT         diag.RAT  `json:"rat"`
	Band        diag.Band `json:"band"`
	ARFCN       uint32    `json:"arfcn"`
	PCI         uint16    `json:"pci"`
	BufferBytes uint64    `json:"buffer_bytes,omitempty"`
	Bursts      uint64    `json:"bursts,omitempty"`
	Updated     time.Time `json:"updated"`
	// RateBytesPerSecond is the delivery rate seen in the cell when its
	// buffer estimate last changed; 0 when unknown.
	RateBytesPerSecond float64 `json:"rate_bytes_per_second,omitempty"`
	// Reports are the learning predictor's counts of the reports
	// measured while the cell served, by trigger, measured band and
	// carrier relation.
	Reports []reportCount `json:"reports,omitempty"`
	// Lead is what the host's learning predictor learnt of the
	// report-to-command lead on serving cells of the cell's band; nil
	// when it has measured none.
	Lead *leadSummary `json:"lead,omitempty"`
}

// reportCount is one kind of report and how often a handover command
// followed it.
type reportCount struct {
	Event    diag.MeasEvent `json:"event"`
	Measured diag.Band      `json:"measured,omitempty"`
	// Carrier is the measured carrier's relation to the serving cell's
	// (statemachine.Carrier*), empty when unknown.
	Carrier  string `json:"carrier,omitempty"`
	Reports  uint32 `json:"reports"`
	Followed uint32 `json:"followed"`
}

func (r reportCount) is(event diag.MeasEvent, measured diag.Band, carrier string) bool {
	return r.Event == event && r.Measured == measured && r.Carrier == carrier
}

// leadSummary is a host's report-to-command lead for a band: the
// Quantile of its last Samples intervals.
type leadSummary struct {
	Quantile float64 `json:"q"`
	Millis   float64 `json:"ms"`
	Samples  int     `json:"samples"`
}

func (l leadSummary) lead() time.Duration {
	return time.Duration(l.Millis * float64(time.Millisecond))
}

// maxPeerLead bounds the lead a peer may report: twice the longest a
// command followed a report by in data/handover-timing.md. The machine
// caps what it uses at one second; a larger value is no measurement.
const maxPeerLead = 2 * time.Second

// maxLeadSamples bounds the intervals a lead may say it rests on: far
// above the 64 a machine keeps, more is no measurement.
const maxLeadSamples = 1 << 16

// measuredBands and carriers are the values a report kind may hold
// besides its event (diag.MeasEvent.Known).
var (
	measuredBands = []diag.Band{"", diag.BandSub6, diag.BandMmWave}
	carriers      = []string{"", statemachine.CarrierIntraFrequency, statemachine.CarrierInterFrequency, statemachine.CarrierInterRAT}
)

func (e entry) cell() diag.Cell {
	return diag.Cell{RAT: e.RAT, Band: e.Band, ARFCN: e.ARFCN, PCI: e.PCI}
}

// cellKey is the KV key of what host published about cell in network:
// NETWORK.RAT.ARFCN.PCI.HOST. Every host has its own key per cell, so
// that peers never overwrite each other and a reader sees them all.
func cellKey(network string, c diag.Cell, host string) string {
	return fmt.Sprintf("%s.%s.%d.%d.%s", network, c.RAT, c.ARFCN, c.PCI, host)
}

// parseKey reads a key of network back into its cell identity and host.
func parseKey(network, key string) (diag.CellKey, string, error) {
	tokens := strings.Split(key, ".")
	if len(tokens) != 5 || tokens[0] != network {
		return diag.CellKey{}, "", fmt.Errorf("key %q: not NETWORK.RAT.ARFCN.PCI.HOST", key)
	}
	rat := diag.RAT(tokens[1])
	arfcn, arfcnErr := strconv.ParseUint(tokens[2], 10, 32)
	pci, pciErr := strconv.ParseUint(tokens[3], 10, 16)
	switch {
	case rat != diag.RATLTE && rat != diag.RATNR:
		return diag.CellKey{}, "", fmt.Errorf("key %q: unknown rat", key)
	case arfcnErr != nil || pciErr != nil:
		return diag.CellKey{}, "", fmt.Errorf("key %q: bad arfcn or pci", key)
	case !NameRE.MatchString(tokens[4]):
		return diag.CellKey{}, "", fmt.Errorf("key %q: bad host", key)
	}
	return diag.CellKey{RAT: rat, ARFCN: uint32(arfcn), PCI: uint16(pci)}, tokens[4], nil
}

// malformedError carries the reason an entry was skipped.
type malformedError struct {
	reason string
	err    error
}

func (e *malformedError) Error() string { return e.reason + ": " + e.err.Error() }

func malformed(reason string, format string, args ...any) error {
	return &malformedError{reason: reason, err: fmt.Errorf(format, args...)}
}

// malformedReason is the reason of err, MalformedDecode if it carries
// none.
func malformedReason(err error) string {
	var m *malformedError
	if errors.As(err, &m) {
		return m.reason
	}
	return MalformedDecode
}

// decodeEntry reads and checks the value stored under a key naming cell
// key; created is when the server stored it.
func decodeEntry(key diag.CellKey, value []byte, created time.Time) (entry, error) {
	if len(value) > maxValueSize {
		return entry{}, malformed(MalformedDecode, "%d bytes", len(value))
	}
	var e entry
	if err := json.Unmarshal(value, &e); err != nil {
		return entry{}, malformed(MalformedDecode, "%v", err)
	}
	switch {
	case e.Version != entryVersion:
		return entry{}, malformed(MalformedSchema, "version %d", e.Version)
	case e.cell().Key() != key:
		return entry{}, malformed(MalformedSchema, "cell %s under the key of another", e.cell())
	case e.Band != diag.BandOf(e.RAT, e.ARFCN):
		return entry{}, malformed(MalformedSchema, "band %q of %s", e.Band, e.cell())
	case e.BufferBytes > estimator.MaxWindowBytes || (e.BufferBytes == 0) != (e.Bursts == 0):
		return entry{}, malformed(MalformedValue, "buffer of %d bytes from %d bursts", e.BufferBytes, e.Bursts)
	case e.BufferBytes == 0 && len(e.Reports) == 0:
		return entry{}, malformed(MalformedValue, "no measurement")
	case e.Updated.IsZero() || e.Updated.After(created.Add(maxClockSkew)):
		return entry{}, malformed(MalformedValue, "updated %v, stored %v", e.Updated, created)
	case !(e.RateBytesPerSecond >= 0 && e.RateBytesPerSecond <= maxRateBytesPerSecond): // also rejects NaN
		return entry{}, malformed(MalformedValue, "rate %v", e.RateBytesPerSecond)
	case len(e.Reports) > maxReports:
		return entry{}, malformed(MalformedValue, "%d kinds of report", len(e.Reports))
	}
	for i, r := range e.Reports {
		switch {
		case !r.Event.Known() || !slices.Contains(measuredBands, r.Measured) || !slices.Contains(carriers, r.Carrier):
			return entry{}, malformed(MalformedValue, "report kind %q %q %q", r.Event, r.Measured, r.Carrier)
		case r.Followed > r.Reports:
			return entry{}, malformed(MalformedValue, "report %q: %d followed of %d", r.Event, r.Followed, r.Reports)
		case slices.ContainsFunc(e.Reports[:i], func(o reportCount) bool { return o.is(r.Event, r.Measured, r.Carrier) }):
			// Twice the same kind would count a peer twice.
			return entry{}, malformed(MalformedValue, "report kind %q %q %q twice", r.Event, r.Measured, r.Carrier)
		}
	}
	if l := e.Lead; l != nil && !validLead(*l) {
		return entry{}, malformed(MalformedValue, "lead %v ms at quantile %v of %d intervals", l.Millis, l.Quantile, l.Samples)
	}
	return e, nil
}

// validLead: the comparisons are on the floats, so that NaN and values
// beyond a Duration fail them.
func validLead(l leadSummary) bool {
	return l.Quantile > 0 && l.Quantile <= 1 &&
		l.Millis > 0 && l.Millis <= float64(maxPeerLead/time.Millisecond) &&
		l.Samples >= 1 && l.Samples <= maxLeadSamples
}

// maxClockSkew is how far in the future of the server's clock an entry
// may say it was updated.
const maxClockSkew = 5 * time.Minute

// maxRateBytesPerSecond is 100 Gbit/s, beyond any cell.
const maxRateBytesPerSecond = 100e9 / 8

func entryOf(r estimator.CellRecord, rate float64) entry {
	c := r.Cell.Normalized()
	return entry{
		Version: entryVersion, RAT: c.RAT, Band: c.Band, ARFCN: c.ARFCN, PCI: c.PCI,
		BufferBytes: r.BufferBytes, Bursts: r.Bursts, Updated: r.Updated, RateBytesPerSecond: rate,
	}
}
