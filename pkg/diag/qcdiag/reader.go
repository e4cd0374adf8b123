// Package qcdiag reads Qualcomm DIAG streams: the HDLC-framed byte stream
// of a modem's diagnostic port or of a recorded .qmdl/.mi2log file. It
// splits frames, checks their CRC, lifts log packets out of them and turns
// the RRC over-the-air log packets into diag.RRCMessage values.
package qcdiag

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"sync/atomic"
	"time"

	"github.com/m2ho/m2ho/pkg/diag"
)

// Framing constants. A frame ends with flagByte (there is no leading
// flag); escapeByte escapes the next byte, which is XORed with escapeXOR.
const (
	flagByte   = 0x7E
	escapeByte = 0x7D
	escapeXOR  = 0x20
	crcLen     = 2
)

// DIAG command codes seen in streams.
const (
	// CmdLog is a log packet.
	CmdLog = 0x10
	// CmdMultiRadio wraps a command with a radio/subscription header.
	CmdMultiRadio = 0x98
	// multiRadioHeaderLen is the length of the 0x98 wrapper before the
	// wrapped command.
	multiRadioHeaderLen = 8
)

// logHeaderLen is the log packet header: command, more, outer length,
// inner length, log code, timestamp (<BBHHHQ).
const logHeaderLen = 16

// MaxFrame is the largest unescaped frame a log packet can make: a wrapper,
// the four bytes before the 16-bit outer length, that length, and the CRC.
const MaxFrame = multiRadioHeaderLen + 4 + 0xFFFF + crcLen

// readBufferSize holds the longest legal escaped frame (every byte
// escaped) with room to spare; a longer run without a flag is oversize.
const readBufferSize = 256 << 10

// Error reasons counted in diag.Stats.
const (
	ReasonCRC               = "crc"
	ReasonTruncatedFrame    = "truncated_frame"
	ReasonOversizeFrame     = "oversize_frame"
	ReasonBadEscape         = "bad_escape"
	ReasonMalformedLog      = "malformed_log_packet"
	ReasonUnknownLogVersion = "unknown_log_version"
)

// Counters describe what a Reader has seen so far.
type Counters struct {
	// Frames is every frame, good or bad; each ends up as exactly one of
	// LogPackets, NonLog, Malformed, CRCErrors, Oversize or BadEscapes.
	Frames uint64
	// CRCErrors are frames whose CRC did not match and that held no
	// recoverable frame.
	CRCErrors uint64
	// Truncated counts frames cut short when a flag byte was lost: the
	// start of one frame followed by a complete frame, which is recovered.
	// A partial frame at the end of the input counts here too.
	Truncated uint64
	// Oversize frames exceed MaxFrame and are dropped.
	Oversize uint64
	// BadEscapes are frames ending in an escape byte, or too short to
	// hold a CRC.
	BadEscapes uint64
	// LogPackets were delivered by Next.
	LogPackets uint64
	// NonLog frames are command responses and other non-log traffic.
	NonLog uint64
	// Malformed log packets have lengths that contradict the frame.
	Malformed uint64
	// UnknownCodes are log packets of codes this package has no layout
	// for; UnknownVersions are of a known code in an unknown version.
	UnknownCodes    uint64
	UnknownVersions uint64
}

type atomicCounters struct {
	frames, crcErrors, truncated, oversize, badEscapes atomic.Uint64
	logPackets, nonLog, malformed                      atomic.Uint64
	unknownCodes, unknownVersions                      atomic.Uint64
}

// LayoutStatus says whether this package can interpret a log packet.
type LayoutStatus uint8

// Layout statuses.
const (
	// LayoutUnknownCode: no layout for the log code.
	LayoutUnknownCode LayoutStatus = iota
	// LayoutUnknownVersion: the code is known, its version is not.
	LayoutUnknownVersion
	// LayoutKnown: the packet can be interpreted.
	LayoutKnown
)

// LogPacket is one DIAG log packet.
type LogPacket struct {
	Code uint16
	// Version is the packet version of codes whose layout has one (the
	// first payload byte; the low byte of a 32-bit version for NR codes).
	Version uint8
	// Layout says whether Version of Code is understood here.
	Layout LayoutStatus
	// Time is the modem's timestamp; Timestamp its raw value.
	Time      time.Time
	Timestamp uint64
	// Payload follows the 16-byte log header; it is owned by the packet.
	Payload []byte
	// Subscription is the SIM subscription of a multi-SIM modem, from the
	// multi-radio wrapper: 0 for the first (and without a wrapper).
	Subscription uint8
}

// Reader splits a DIAG byte stream into frames and log packets.
type Reader struct {
	br    *bufio.Reader
	stats *diag.Stats
	frame []byte
	c     atomicCounters
	// subscription is that of the multi-radio wrapper of the last frame.
	subscription uint8
}

// NewReader reads frames from r. Errors are counted in stats (which may be
// nil) by reason, and in the Reader's Counters.
func NewReader(r io.Reader, stats *diag.Stats) *Reader {
	if stats == nil {
		stats = &diag.Stats{}
	}
	return &Reader{br: bufio.NewReaderSize(r, readBufferSize), stats: stats, frame: make([]byte, 0, MaxFrame)}
}

// Counters returns a snapshot; safe to call while another goroutine reads.
func (r *Reader) Counters() Counters {
	return Counters{
		Frames: r.c.frames.Load(), CRCErrors: r.c.crcErrors.Load(), Truncated: r.c.truncated.Load(),
		Oversize: r.c.oversize.Load(), BadEscapes: r.c.badEscapes.Load(), LogPackets: r.c.logPackets.Load(),
		NonLog: r.c.nonLog.Load(), Malformed: r.c.malformed.Load(),
		UnknownCodes: r.c.unknownCodes.Load(), UnknownVersions: r.c.unknownVersions.Load(),
	}
}

func (r *Reader) fail(c *atomic.Uint64, reason string) {
	c.Add(1)
	r.stats.CountError(reason)
}

// Next returns the next log packet, skipping (and counting) bad frames and
// non-log frames. It returns io.EOF at the end of the input.
func (r *Reader) Next() (LogPacket, error) {
	for {
		body, err := r.NextFrame()
		if err != nil {
			return LogPacket{}, err
		}
		if len(body) == 0 || body[0] != CmdLog {
			r.c.nonLog.Add(1)
			continue
		}
		p, err := ParseLogPacket(body)
		if err != nil {
			r.fail(&r.c.malformed, ReasonMalformedLog)
			continue
		}
		p.Subscription = r.subscription
		r.c.logPackets.Add(1)
		switch p.Layout {
		case LayoutUnknownCode:
			r.c.unknownCodes.Add(1)
		case LayoutUnknownVersion:
			r.fail(&r.c.unknownVersions, ReasonUnknownLogVersion)
		}
		return p, nil
	}
}

// NextFrame returns the content of the next good frame, CRC removed and a
// multi-radio wrapper stripped. The slice is valid until the next call.
// Command responses are read this way.
func (r *Reader) NextFrame() ([]byte, error) {
	for {
		raw, err := r.br.ReadSlice(flagByte)
		if errors.Is(err, bufio.ErrBufferFull) {
			r.c.frames.Add(1)
			r.fail(&r.c.oversize, ReasonOversizeFrame)
			if err := r.skipFrame(); err != nil {
				return nil, r.endOfInput(nil, err)
			}
			continue
		}
		if err != nil {
			return nil, r.endOfInput(raw, err)
		}
		raw = raw[:len(raw)-1]
		if len(raw) == 0 {
			// Back-to-back flags: some hosts send one before each request.
			continue
		}
		r.c.frames.Add(1)
		frame, ok := unescape(r.frame[:0], raw)
		r.frame = frame[:0]
		if !ok || len(frame) <= crcLen {
			r.fail(&r.c.badEscapes, ReasonBadEscape)
			continue
		}
		if len(frame) > MaxFrame {
			r.fail(&r.c.oversize, ReasonOversizeFrame)
			continue
		}
		body, ok := r.verify(frame)
		if !ok {
			continue
		}
		r.subscription = 0
		if body[0] == CmdMultiRadio && len(body) > multiRadioHeaderLen {
			r.subscription = subscriptionIndex(binary.LittleEndian.Uint32(body[multiRadioHeaderLen-4:]))
			body = body[multiRadioHeaderLen:]
		}
		return body, nil
	}
}

// subscriptionIndex turns the subscription ID of a multi-radio wrapper,
// which counts from 1, into an index from 0. Modems also write 0 and
// 0xFFFFFFFF (-1) for the first subscription.
func subscriptionIndex(id uint32) uint8 {
	if id == 0 || id == math.MaxUint32 {
		return 0
	}
	return uint8(min(id-1, math.MaxUint8))
}

// skipFrame discards input up to and including the next flag.
func (r *Reader) skipFrame() error {
	for {
		_, err := r.br.ReadSlice(flagByte)
		if !errors.Is(err, bufio.ErrBufferFull) {
			return err
		}
	}
}

func (r *Reader) endOfInput(partial []byte, err error) error {
	if len(partial) > 0 {
		r.fail(&r.c.truncated, ReasonTruncatedFrame)
	}
	if errors.Is(err, io.EOF) {
		return io.EOF
	}
	return fmt.Errorf("read diag stream: %w", err)
}

// verify checks the frame's CRC. A frame whose CRC fails may be the
// start of a frame whose end was lost followed by a whole frame (real
// captures contain these); the whole frame is recovered when its length
// fields and CRC agree.
func (r *Reader) verify(frame []byte) ([]byte, bool) {
	n := len(frame) - crcLen
	want := binary.LittleEndian.Uint16(frame[n:])
	body := frame[:n]
	if CRC16(body) == want {
		return body, true
	}
	if k := embeddedFrame(body, want); k > 0 {
		r.fail(&r.c.truncated, ReasonTruncatedFrame)
		return body[k:], true
	}
	r.fail(&r.c.crcErrors, ReasonCRC)
	return nil, false
}

// embeddedFrame finds the smallest offset k > 0 where a log packet
// (possibly wrapped) starts whose declared length ends exactly at the end
// of body and whose CRC is want; 0 when there is none.
//
// A CRC per candidate offset would cost O(len(body)) each, so a frame
// crafted with a candidate at every few bytes would cost O(len(body)²).
// Instead one backward pass finds every offset whose suffix has CRC want:
// the register step is invertible, so stepping the final register (^want)
// back over body from its end gives, at each k, the register a CRC of
// body[k:] must start from to end at want. The suffix matches exactly when
// that register is the initial 0xFFFF. The header checks run only there.
func embeddedFrame(body []byte, want uint16) int {
	found := 0
	c := ^want
	for k := len(body) - 1; k >= 1; k-- {
		c = crcUnstep(c, body[k])
		if c == crcInit && embeddedStart(body, k) {
			found = k
		}
	}
	return found
}

// embeddedStart reports whether a log packet, bare or in the multi-radio
// wrapper, starts at k and its outer length ends exactly at the end of body.
func embeddedStart(body []byte, k int) bool {
	if k+logHeaderLen > len(body) {
		return false
	}
	start := k
	switch body[k] {
	case CmdMultiRadio:
		start = k + multiRadioHeaderLen
		if start+logHeaderLen > len(body) || body[start] != CmdLog {
			return false
		}
	case CmdLog:
	default:
		return false
	}
	return int(binary.LittleEndian.Uint16(body[start+2:]))+4 == len(body)-start
}

// unescape appends src to dst with escapes undone; false when src ends in
// an escape byte.
func unescape(dst, src []byte) ([]byte, bool) {
	for {
		i := bytes.IndexByte(src, escapeByte)
		if i < 0 {
			return append(dst, src...), true
		}
		if i+1 >= len(src) {
			return dst, false
		}
		dst = append(dst, src[:i]...)
		dst = append(dst, src[i+1]^escapeXOR)
		src = src[i+2:]
	}
}

// Escape frames body for the wire: CRC appended, special bytes escaped,
// flag at the end. It is how requests are sent to a modem.
func Escape(body []byte) []byte {
	crc := CRC16(body)
	raw := binary.LittleEndian.AppendUint16(append([]byte(nil), body...), crc)
	out := make([]byte, 0, len(raw)+len(raw)/8+1)
	for _, b := range raw {
		if b == flagByte || b == escapeByte {
			out = append(out, escapeByte, b^escapeXOR)
			continue
		}
		out = append(out, b)
	}
	return append(out, flagByte)
}

// ParseLogPacket parses a log packet frame body (command 0x10, wrapper
// already removed).
func ParseLogPacket(body []byte) (LogPacket, error) {
	if len(body) < logHeaderLen || body[0] != CmdLog {
		return LogPacket{}, fmt.Errorf("log packet: %d bytes, want a 0x10 command of at least %d", len(body), logHeaderLen)
	}
	outer := int(binary.LittleEndian.Uint16(body[2:]))
	inner := int(binary.LittleEndian.Uint16(body[4:]))
	if outer+4 != len(body) {
		return LogPacket{}, fmt.Errorf("log packet: outer length %d for %d bytes", outer, len(body))
	}
	if inner < logHeaderLen-4 || inner > outer {
		return LogPacket{}, fmt.Errorf("log packet: inner length %d outside %d..%d", inner, logHeaderLen-4, outer)
	}
	p := LogPacket{
		Code:      binary.LittleEndian.Uint16(body[6:]),
		Timestamp: binary.LittleEndian.Uint64(body[8:]),
		Payload:   bytes.Clone(body[logHeaderLen : 4+inner]),
	}
	p.Time = TimeFromTimestamp(p.Timestamp)
	p.Version, p.Layout = classify(p.Code, p.Payload)
	return p, nil
}

// gpsEpochUnix is 1980-01-06T00:00:00Z, the epoch of DIAG timestamps.
const gpsEpochUnix = 315964800

// TimeFromTimestamp converts a DIAG timestamp: the upper 48 bits count
// 1.25 ms ticks since 1980-01-06 UTC, the lower 16 bits are a fraction of
// a tick in 1/40960 ms (3125/128 ns).
func TimeFromTimestamp(ts uint64) time.Time {
	ticks, frac := ts>>16, ts&0xFFFF
	const ticksPerSecond = 800
	sec := ticks / ticksPerSecond
	ns := (ticks%ticksPerSecond)*1_250_000 + frac*3125/128
	return time.Unix(int64(gpsEpochUnix+sec), int64(ns)).UTC()
}

// Add returns the field-wise sum of c and o (counts of several readers,
// for example across reconnections of a serial port).
func (c Counters) Add(o Counters) Counters {
	return Counters{
		Frames: c.Frames + o.Frames, CRCErrors: c.CRCErrors + o.CRCErrors, Truncated: c.Truncated + o.Truncated,
		Oversize: c.Oversize + o.Oversize, BadEscapes: c.BadEscapes + o.BadEscapes, LogPackets: c.LogPackets + o.LogPackets,
		NonLog: c.NonLog + o.NonLog, Malformed: c.Malformed + o.Malformed,
		UnknownCodes: c.UnknownCodes + o.UnknownCodes, UnknownVersions: c.UnknownVersions + o.UnknownVersions,
	}
}
