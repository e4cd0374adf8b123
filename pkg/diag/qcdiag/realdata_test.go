package qcdiag_test

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/internal/shareddata"
	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/pkg/diag/qcdiag"
)

// realFile is what an independent reading of one shared capture found.
type realFile struct {
	frames, truncated, nonLog, unknownPDU int
	codes                                 map[uint16]int
	channels                              map[string]int
}

// realFiles holds the expectations for every shared DIAG capture. They
// were obtained once, by hand, with a separate Python script (its own
// framer: split on 0x7E, undo 0x7D escapes, bitwise CRC-16/X.25; a frame
// whose CRC fails is searched by brute force for a suffix whose CRC
// matches, which is how the truncated frames were found; 0x98 wrappers
// skipped 8 bytes; log code read at offset 6 of the log header). RRC
// channels came from the same script with the PDU-number tables of SCAT
// and MobileInsight typed in anew (LTE versions 8, 9, 26; NR version 8),
// with every PDU length field checked against the bytes that follow.
// "unknownPDU" is NR PDU number 25, which no public table lists for
// version 8; PDU number 26 (nr-RadioBearerConfig) is skipped silently.
func realFiles() map[string]realFile {
	return map[string]realFile{
		"20201115_181637_Xiaomi-Mi10_46000.mi2log": {
			frames: 13, truncated: 0, nonLog: 1, unknownPDU: 0,
			codes:    map[uint16]int{0xB821: 12},
			channels: map[string]int{"nr BCCH-BCH": 1, "nr RRCReconfiguration": 2, "nr RRCReconfigurationComplete": 2, "nr UL-DCCH": 1},
		},
		"20201115_181751_Xiaomi-Mi10_46000.mi2log": {
			frames: 2, truncated: 0, nonLog: 1, unknownPDU: 0,
			codes:    map[uint16]int{0xB821: 1},
			channels: map[string]int{"nr UL-DCCH": 1},
		},
		"20201115_181843_Xiaomi-Mi10_46000.mi2log": {
			frames: 19, truncated: 0, nonLog: 1, unknownPDU: 0,
			codes:    map[uint16]int{0xB821: 18},
			channels: map[string]int{"nr BCCH-BCH": 2, "nr RRCReconfiguration": 3, "nr RRCReconfigurationComplete": 3, "nr UL-DCCH": 5},
		},
		"20201116_123302_Xiaomi-Mi10_46000.mi2log": {
			frames: 1209, truncated: 1, nonLog: 1, unknownPDU: 0,
			codes:    map[uint16]int{0xB0C0: 891, 0xB0C1: 53, 0xB0C2: 28, 0xB0E2: 10, 0xB0E3: 8, 0xB0E5: 25, 0xB0EC: 22, 0xB0ED: 32, 0xB0EE: 63, 0xB821: 76},
			channels: map[string]int{"lte BCCH-DL-SCH": 139, "lte DL-CCCH": 8, "lte DL-DCCH": 98, "lte PCCH": 408, "lte UL-CCCH": 8, "lte UL-DCCH": 230, "nr BCCH-BCH": 8, "nr RRCReconfiguration": 13, "nr RRCReconfigurationComplete": 13, "nr UL-DCCH": 23},
		},
		"20201116_123435_Xiaomi-Mi10_46000.mi2log": {
			frames: 930, truncated: 3, nonLog: 0, unknownPDU: 0,
			codes:    map[uint16]int{0xB0C0: 579, 0xB0C1: 42, 0xB0C2: 30, 0xB0E5: 24, 0xB0EC: 17, 0xB0ED: 36, 0xB0EE: 49, 0xB821: 153},
			channels: map[string]int{"lte BCCH-DL-SCH": 110, "lte DL-CCCH": 9, "lte DL-DCCH": 92, "lte PCCH": 186, "lte UL-CCCH": 8, "lte UL-DCCH": 174, "nr BCCH-BCH": 21, "nr RRCReconfiguration": 32, "nr RRCReconfigurationComplete": 32, "nr UL-DCCH": 34},
		},
		"20201116_123611_Xiaomi-Mi10_46000.mi2log": {
			frames: 910, truncated: 3, nonLog: 0, unknownPDU: 0,
			codes:    map[uint16]int{0xB0C0: 551, 0xB0C1: 52, 0xB0C2: 40, 0xB0E5: 18, 0xB0EC: 18, 0xB0ED: 40, 0xB0EE: 58, 0xB821: 133},
			channels: map[string]int{"lte BCCH-DL-SCH": 141, "lte DL-CCCH": 8, "lte DL-DCCH": 100, "lte PCCH": 95, "lte UL-CCCH": 9, "lte UL-DCCH": 198, "nr BCCH-BCH": 16, "nr RRCReconfiguration": 31, "nr RRCReconfigurationComplete": 31, "nr UL-DCCH": 28},
		},
		"20201116_124000_Xiaomi-Mi10_46000.mi2log": {
			frames: 1075, truncated: 0, nonLog: 0, unknownPDU: 0,
			codes:    map[uint16]int{0xB0C0: 702, 0xB0C1: 50, 0xB0C2: 35, 0xB0E5: 28, 0xB0EC: 19, 0xB0ED: 39, 0xB0EE: 58, 0xB821: 144},
			channels: map[string]int{"lte BCCH-DL-SCH": 127, "lte DL-CCCH": 14, "lte DL-DCCH": 91, "lte PCCH": 223, "lte UL-CCCH": 14, "lte UL-DCCH": 233, "nr BCCH-BCH": 16, "nr RRCReconfiguration": 20, "nr RRCReconfigurationComplete": 20, "nr UL-DCCH": 56},
		},
		"20201116_124345_Xiaomi-Mi10_46000.mi2log": {
			frames: 954, truncated: 1, nonLog: 0, unknownPDU: 0,
			codes:    map[uint16]int{0xB0C0: 622, 0xB0C1: 28, 0xB0C2: 20, 0xB0E5: 33, 0xB0EC: 11, 0xB0ED: 21, 0xB0EE: 31, 0xB821: 188},
			channels: map[string]int{"lte BCCH-DL-SCH": 77, "lte DL-CCCH": 4, "lte DL-DCCH": 74, "lte PCCH": 286, "lte UL-CCCH": 4, "lte UL-DCCH": 177, "nr BCCH-BCH": 24, "nr RRCReconfiguration": 29, "nr RRCReconfigurationComplete": 29, "nr UL-DCCH": 72},
		},
		"20201116_124753_Xiaomi-Mi10_46000.mi2log": {
			frames: 958, truncated: 0, nonLog: 0, unknownPDU: 1,
			codes:    map[uint16]int{0xB0C0: 687, 0xB0C1: 44, 0xB0C2: 27, 0xB0E5: 11, 0xB0EC: 2, 0xB0ED: 4, 0xB0EE: 31, 0xB821: 152},
			channels: map[string]int{"lte BCCH-DL-SCH": 118, "lte DL-CCCH": 1, "lte DL-DCCH": 66, "lte PCCH": 299, "lte UL-CCCH": 1, "lte UL-DCCH": 202, "nr BCCH-BCH": 20, "nr RRCReconfiguration": 31, "nr RRCReconfigurationComplete": 31, "nr UL-DCCH": 48},
		},
		"mobility_sample.mi2log": {
			frames: 8183, truncated: 0, nonLog: 0, unknownPDU: 0,
			codes:    map[uint16]int{0xB0C0: 6478, 0xB0C1: 601, 0xB0C2: 310, 0xB0E5: 41, 0xB0EC: 58, 0xB0ED: 154, 0xB0EE: 541},
			channels: map[string]int{"lte BCCH-DL-SCH": 1879, "lte DL-CCCH": 70, "lte DL-DCCH": 1092, "lte PCCH": 1010, "lte UL-CCCH": 86, "lte UL-DCCH": 2341},
		},
		"tmobile.mi2log": {
			frames: 2167, truncated: 0, nonLog: 0, unknownPDU: 0,
			codes:    map[uint16]int{0x7130: 2, 0x7131: 1, 0xB063: 141, 0xB064: 100, 0xB0C0: 109, 0xB0C2: 3, 0xB0E2: 2, 0xB0E3: 2, 0xB0EC: 9, 0xB0ED: 11, 0xB0EE: 11, 0xB126: 225, 0xB179: 237, 0xB187: 6, 0xB193: 1071, 0xB195: 237},
			channels: map[string]int{"lte DL-CCCH": 3, "lte DL-DCCH": 28, "lte PCCH": 45, "lte UL-CCCH": 3, "lte UL-DCCH": 30},
		},
	}
}

func TestRealCaptures(t *testing.T) {
	dir := shareddata.DataDir(t, "diag")
	files, err := filepath.Glob(filepath.Join(dir, "*.mi2log"))
	require.NoError(t, err)
	expected := realFiles()
	require.Len(t, files, len(expected), "shared captures changed; re-derive the expectations")
	for _, path := range files {
		name := filepath.Base(path)
		t.Run(name, func(t *testing.T) {
			want, ok := expected[name]
			require.True(t, ok, "no expectation for %s", name)
			f, err := os.Open(path)
			require.NoError(t, err)
			defer f.Close()

			stats := &diag.Stats{}
			r := qcdiag.NewReader(f, stats)
			joiner := qcdiag.RRCJoiner{Stats: stats}
			codes := map[uint16]int{}
			channels := map[string]int{}
			unknownPDU := 0
			var last time.Time
			for {
				p, err := r.Next()
				if errors.Is(err, io.EOF) {
					break
				}
				require.NoError(t, err)
				codes[p.Code]++
				last = p.Time
				msg, ok, err := joiner.Add(p)
				if errors.Is(err, qcdiag.ErrUnknownPDU) {
					unknownPDU++
					continue
				}
				require.NoError(t, err, "packet 0x%04X v%d", p.Code, p.Version)
				if ok {
					assert.NotEmpty(t, msg.PDU)
					channels[fmt.Sprintf("%s %s", msg.RAT, msg.Channel)]++
				}
			}
			c := r.Counters()
			assert.Zero(t, c.CRCErrors, "crc errors")
			assert.Zero(t, c.Malformed, "malformed log packets")
			assert.Zero(t, c.Oversize, "oversize frames")
			assert.Zero(t, c.BadEscapes, "bad escapes")
			assert.Zero(t, c.UnknownVersions, "unknown versions")
			assert.Equal(t, uint64(want.frames), c.Frames, "frames")
			assert.Equal(t, uint64(want.truncated), c.Truncated, "truncated frames")
			assert.Equal(t, uint64(want.nonLog), c.NonLog, "non-log frames")
			assert.Equal(t, want.codes, codes, "log code histogram")
			total := 0
			for _, n := range want.codes {
				total += n
			}
			assert.Equal(t, uint64(total), c.LogPackets)
			assert.Equal(t, uint64(total-want.codes[qcdiag.CodeLTERRCOTA]-want.codes[qcdiag.CodeNRRRCOTA]), c.UnknownCodes)
			assert.Equal(t, want.channels, channels, "rrc channels")
			assert.Equal(t, want.unknownPDU, unknownPDU, "unknown rrc pdu numbers")
			// The phone named each Xiaomi capture after the local time (UTC+8)
			// it closed the file: an independent check of the timestamp
			// conversion to within two seconds.
			if stamp, ok := strings.CutSuffix(name, "_Xiaomi-Mi10_46000.mi2log"); ok {
				closed, err := time.ParseInLocation("20060102_150405", stamp, time.FixedZone("CST", 8*3600))
				require.NoError(t, err)
				assert.WithinDuration(t, closed, last, 2*time.Second, "last packet time against the file name")
			}
		})
	}
}
