// Package qcdiagtest is the modem's side of DIAG, for tests of the host's
// side in qcdiag and of what reads through it: it encodes log packets and
// their timestamps, and reads and answers the LOG_CONFIG set-mask request
// as a modem does. Nothing but tests imports it.
package qcdiagtest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/m2ho/m2ho/pkg/diag/qcdiag"
)

// gpsEpoch is 1980-01-06T00:00:00Z, the epoch of DIAG timestamps.
var gpsEpoch = time.Date(1980, 1, 6, 0, 0, 0, 0, time.UTC)

// TimestampFromTime is the inverse of qcdiag.TimeFromTimestamp, to the
// resolution of the fraction: the upper 48 bits count 1.25 ms ticks since
// 1980-01-06 UTC, the lower 16 bits a fraction of a tick in 1/40960 ms.
func TimestampFromTime(t time.Time) uint64 {
	d := t.Sub(gpsEpoch)
	if d < 0 {
		return 0
	}
	ns := uint64(d)
	ticks := ns / 1_250_000
	frac := (ns % 1_250_000) * 128 / 3125
	return ticks<<16 | frac
}

// logHeaderAfterLength is the part of a log packet's header that its
// lengths count: the inner length, the log code and the timestamp.
const logHeaderAfterLength = 2 + 2 + 8

// EncodeLogPacket builds the body of a log packet frame (before
// qcdiag.Escape): command, more, outer and inner lengths, code and the
// timestamp of t, then payload.
func EncodeLogPacket(code uint16, t time.Time, payload []byte) []byte {
	n := logHeaderAfterLength + len(payload)
	b := []byte{qcdiag.CmdLog, 0}
	b = binary.LittleEndian.AppendUint16(b, uint16(n))
	b = binary.LittleEndian.AppendUint16(b, uint16(n))
	b = binary.LittleEndian.AppendUint16(b, code)
	b = binary.LittleEndian.AppendUint64(b, TimestampFromTime(t))
	return append(b, payload...)
}

// setMaskOp is the set-mask operation word, taken from the request the
// host's side builds so that both sides speak the one protocol.
var setMaskOp = func() uint32 {
	req, err := qcdiag.SetMaskRequest(0, 0, nil)
	if err != nil {
		panic(err)
	}
	return binary.LittleEndian.Uint32(req[4:])
}()

// ParseSetMaskRequest reads a set-mask request (as a modem does) and
// returns its equipment and enabled log codes.
func ParseSetMaskRequest(req []byte) (equipment uint32, codes []uint16, err error) {
	if len(req) < 16 || req[0] != qcdiag.CmdLogConfig || binary.LittleEndian.Uint32(req[4:]) != setMaskOp {
		return 0, nil, errors.New("not a LOG_CONFIG set-mask request")
	}
	equipment = binary.LittleEndian.Uint32(req[8:])
	numItems := binary.LittleEndian.Uint32(req[12:])
	mask := req[16:]
	if uint64(len(mask)) != (uint64(numItems)+7)/8 || equipment > 0xF {
		return 0, nil, fmt.Errorf("set-mask request: %d mask bytes for %d items of equipment %d", len(mask), numItems, equipment)
	}
	for item := range numItems {
		if mask[item/8]&(1<<(item%8)) != 0 {
			codes = append(codes, uint16(equipment)<<12|uint16(item))
		}
	}
	return equipment, codes, nil
}

// SetMaskResponse is the modem's answer: the request header with a
// status word (0: accepted) after the operation.
func SetMaskResponse(equipment uint32, status uint32) []byte {
	resp := binary.LittleEndian.AppendUint32(nil, qcdiag.CmdLogConfig)
	resp = binary.LittleEndian.AppendUint32(resp, setMaskOp)
	resp = binary.LittleEndian.AppendUint32(resp, status)
	return binary.LittleEndian.AppendUint32(resp, equipment)
}
