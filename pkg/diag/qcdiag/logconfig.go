package qcdiag

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"time"
)

// LOG_CONFIG (command 0x73) turns log packets on: the modem sends nothing
// until the host sets a mask of wanted log items per equipment.
const (
	CmdLogConfig = 0x73
	// logConfigSetMask is the set-mask operation.
	logConfigSetMask = 3
	// EquipmentLTE is the equipment id of the 0xBxxx log codes, which
	// cover LTE and NR.
	EquipmentLTE = 0x0B
	// DefaultMaskItems is the item count sent with the mask; public tools
	// use it for equipment 0x0B on current modems.
	DefaultMaskItems = 0x09FF
)

// DefaultLogCodes are the log packets the daemon decodes.
var DefaultLogCodes = []uint16{CodeLTERRCOTA, CodeNRRRCOTA}

// SetMaskRequest builds the unescaped LOG_CONFIG set-mask request enabling
// codes (all of one equipment) out of numItems items. Layout: command and
// operation as 32-bit words, equipment id, item count, then a bit per item.
func SetMaskRequest(equipment uint32, numItems uint32, codes []uint16) ([]byte, error) {
	req := binary.LittleEndian.AppendUint32(nil, CmdLogConfig)
	req = binary.LittleEndian.AppendUint32(req, logConfigSetMask)
	req = binary.LittleEndian.AppendUint32(req, equipment)
	req = binary.LittleEndian.AppendUint32(req, numItems)
	mask := make([]byte, (numItems+7)/8)
	for _, code := range codes {
		if uint32(code>>12) != equipment {
			return nil, fmt.Errorf("log code 0x%04X is not of equipment 0x%X", code, equipment)
		}
		item := uint32(code & 0x0FFF)
		if item >= numItems {
			return nil, fmt.Errorf("log code 0x%04X beyond %d items", code, numItems)
		}
		mask[item/8] |= 1 << (item % 8)
	}
	return append(req, mask...), nil
}

// setMaskStatus reads the status of a set-mask response frame.
func setMaskStatus(frame []byte) (uint32, bool) {
	if len(frame) < 12 || frame[0] != CmdLogConfig || binary.LittleEndian.Uint32(frame[4:]) != logConfigSetMask {
		return 0, false
	}
	return binary.LittleEndian.Uint32(frame[8:]), true
}

// ErrNoMaskResponse: the modem did not answer the set-mask request in time.
var ErrNoMaskResponse = errors.New("no LOG_CONFIG response")

// Device is the host side of a DIAG port: requests are written to it and
// a read deadline bounds the wait for answers (*os.File of a tty is one).
type Device interface {
	io.Writer
	SetReadDeadline(t time.Time) error
}

// EnableLogs sends one set-mask request per equipment of codes to dev and
// waits up to timeout for each answer on r, a Reader of dev. Log packets
// arriving meanwhile (a modem that was already logging) are skipped. The
// read deadline is cleared on return.
func EnableLogs(dev Device, r *Reader, codes []uint16, timeout time.Duration) error {
	byEquipment := map[uint32][]uint16{}
	for _, c := range codes {
		byEquipment[uint32(c>>12)] = append(byEquipment[uint32(c>>12)], c)
	}
	equipments := make([]uint32, 0, len(byEquipment))
	for e := range byEquipment {
		equipments = append(equipments, e)
	}
	slices.Sort(equipments)
	defer dev.SetReadDeadline(time.Time{})
	for _, e := range equipments {
		req, err := SetMaskRequest(e, DefaultMaskItems, byEquipment[e])
		if err != nil {
			return err
		}
		if _, err := dev.Write(Escape(req)); err != nil {
			return fmt.Errorf("send LOG_CONFIG: %w", err)
		}
		if err := dev.SetReadDeadline(time.Now().Add(timeout)); err != nil {
			return fmt.Errorf("set read deadline: %w", err)
		}
		for {
			frame, err := r.NextFrame()
			if err != nil {
				if errors.Is(err, os.ErrDeadlineExceeded) {
					return fmt.Errorf("equipment 0x%X: %w", e, ErrNoMaskResponse)
				}
				return fmt.Errorf("await LOG_CONFIG response: %w", err)
			}
			status, ok := setMaskStatus(frame)
			if !ok {
				continue
			}
			if status != 0 {
				return fmt.Errorf("modem refused log mask for equipment 0x%X: status %d", e, status)
			}
			break
		}
	}
	return nil
}
