package qcdiag_test

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/pkg/diag/qcdiag"
	"github.com/m2ho/m2ho/pkg/diag/qcdiag/qcdiagtest"
)

// pipeDevice is a DIAG port made of two pipes: requests go to toModem,
// answers are read from fromModem (which honours read deadlines).
type pipeDevice struct {
	toModem   *os.File
	fromModem *os.File
}

func (d pipeDevice) Write(p []byte) (int, error)       { return d.toModem.Write(p) }
func (d pipeDevice) SetReadDeadline(t time.Time) error { return d.fromModem.SetReadDeadline(t) }

func TestEnableLogs(t *testing.T) {
	logPacket := frame(qcdiag.CodeLTERRCOTA, t0, []byte{8})
	tests := []struct {
		name    string
		answer  []byte
		wantErr error
		errText string
	}{
		{name: "accepted", answer: qcdiag.Escape(qcdiagtest.SetMaskResponse(qcdiag.EquipmentLTE, 0))},
		{name: "accepted after log packets", answer: append(append(logPacket, logPacket...), qcdiag.Escape(qcdiagtest.SetMaskResponse(qcdiag.EquipmentLTE, 0))...)},
		{name: "refused", answer: qcdiag.Escape(qcdiagtest.SetMaskResponse(qcdiag.EquipmentLTE, 1)), errText: "refused"},
		{name: "no answer", answer: logPacket, wantErr: qcdiag.ErrNoMaskResponse},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			reqR, reqW, err := os.Pipe()
			require.NoError(t, err)
			defer reqR.Close()
			defer reqW.Close()
			ansR, ansW, err := os.Pipe()
			require.NoError(t, err)
			defer ansR.Close()
			defer ansW.Close()
			_, err = ansW.Write(tc.answer)
			require.NoError(t, err)

			dev := pipeDevice{toModem: reqW, fromModem: ansR}
			err = qcdiag.EnableLogs(dev, qcdiag.NewReader(ansR, nil), qcdiag.DefaultLogCodes, 200*time.Millisecond)
			switch {
			case tc.wantErr != nil:
				assert.ErrorIs(t, err, tc.wantErr)
			case tc.errText != "":
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.errText)
			default:
				require.NoError(t, err)
			}
			reqW.Close()
			req, err := qcdiag.NewReader(reqR, nil).NextFrame()
			require.NoError(t, err)
			equipment, codes, err := qcdiagtest.ParseSetMaskRequest(req)
			require.NoError(t, err)
			assert.Equal(t, uint32(qcdiag.EquipmentLTE), equipment)
			assert.Equal(t, qcdiag.DefaultLogCodes, codes)
		})
	}
}
