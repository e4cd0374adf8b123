package diag

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rbAllocRecords are rb_alloc records and near misses. Those marked fast
// must be taken by decodeRBAlloc; the others must be left to
// encoding/json.
var rbAllocRecords = []struct {
	line string
	fast bool
}{
	{`{"v":1,"type":"rb_alloc","cell":{"rat":"nr","pci":1,"arfcn":632628},"slot_us":500,"slots":[[106,106],[106,106],[40,106],[0,106]]}`, true},
	{` { "slots" : [ [ 1 , 2 ] ] , "slot_us" : 1000 , "cell" : { "arfcn" : 1850 , "pci" : 503 , "band" : "sub6" , "rat" : "lte" } , "type" : "rb_alloc" , "v" : 1 } ` + "\r\n", true},
	{`{"v":1,"type":"rb_alloc","t":"2024-05-01T10:00:00.5Z","cell":{"rat":"nr","pci":1,"arfcn":632628},"slot_us":500,"slots":[[1,2]]}`, true},
	{`{"v":1,"type":"rb_alloc","t":1714557600500000000,"cell":{"rat":"nr","pci":1,"arfcn":632628},"slot_us":500,"slots":[[1,2]]}`, true},
	{`{"v":2,"type":"rb_alloc"}`, true},
	{`{"type":"rb_alloc","v":-1,"slot_us":-5,"slots":[[-1,0]],"cell":{"rat":"5g","pci":-1}}`, true},
	{`{"v":1,"type":"rb_alloc","cell":{"rat":""},"slots":[[0,0],[3,2]]}`, true},
	{`{"v":1,"type":"rb_alloc","cell":{}}`, false},
	{`{"v":1,"type":"rb_alloc","t":9223372036854775807,"slot_us":-9223372036854775807}`, true},
	{`{"v":1,"type":"rb_alloc","t":9223372036854775808}`, false},
	{`{"v":1,"type":"rb_alloc","slot_us":-9223372036854775808}`, false},
	{`{"v":1,"type":"meas_report","event":"A3"}`, false},
	{`{"v":1,"type":"ho_failure","cause":"rlf"}`, false},
	{`{"v":1,"type":"rb_alloc","slots":[]}`, false},
	{`{"v":1,"type":"rb_alloc","slots":[[1,2,3]]}`, false},
	{`{"v":1,"type":"rb_alloc","slots":[[1]]}`, false},
	{`{"v":1,"type":"rb_alloc","slots":[[1.0,2]]}`, false},
	{`{"v":1,"type":"rb_alloc","slots":[[1e2,200]]}`, false},
	{`{"v":1,"type":"rb_alloc","slots":[[01,2]]}`, false},
	{`{"v":1,"type":"rb_alloc","slots":[[1,99999999999999999999]]}`, false},
	{`{"v":1,"type":"rb_alloc","slots":null}`, false},
	{`{"v":1,"Type":"rb_alloc"}`, false},
	{`{"v":1,"type":"rb_alloc","type":"rb_alloc"}`, false},
	{`{"v":1,"type":"rb_alloc","extra":0}`, false},
	{`{"v":1,"type":"rb_\u0061lloc"}`, false},
	{`{"v":1,"type":"rb_alloc","cell":{"rat":"nr","rat":"lte"}}`, false},
	{`{"v":1,"type":"rb_alloc","cell":{"rat":"nr","cgi":1}}`, false},
	{`{"v":1,"type":"rb_alloc","cell":{"rat":"nr\u00e9"}}`, false},
	{`{"v":1,"type":"rb_alloc","t":0}`, false},
	{`{"v":1,"type":"rb_alloc","t":null}`, false},
	{`{"v":1,"type":"rb_alloc"} x`, false},
	{`{"v":1,"type":"rb_alloc",}`, false},
	{`{"v":1,"type":"rb_alloc"`, false},
	{`{"v":"1","type":"rb_alloc"}`, false},
	{`{}`, false},
	{``, false},
}

// TestDecodeRBAllocAsEncodingJSON: the fast decoder takes the usual
// rb_alloc records and decodes them as encoding/json does, and leaves
// every other record alone.
func TestDecodeRBAllocAsEncodingJSON(t *testing.T) {
	for _, tc := range rbAllocRecords {
		t.Run(tc.line, func(t *testing.T) {
			fast, pairs, taken := decodeRBAlloc([]byte(tc.line), nil)
			assert.Equal(t, tc.fast, taken, "taken by the fast decoder")
			if !taken {
				assert.Equal(t, wireEvent{}, fast, "left as it was")
				return
			}
			var slow wireEvent
			require.NoError(t, json.Unmarshal([]byte(tc.line), &slow))
			assert.Equal(t, slow, asDecodedByJSON(fast, pairs))
		})
	}
}

// FuzzDecodeRBAlloc: whatever the fast decoder takes, encoding/json takes
// too and decodes the same way.
func FuzzDecodeRBAlloc(f *testing.F) {
	for _, tc := range rbAllocRecords {
		f.Add([]byte(tc.line))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		fast, pairs, taken := decodeRBAlloc(line, nil)
		if !taken {
			return
		}
		var slow wireEvent
		require.NoError(t, json.Unmarshal(line, &slow), "encoding/json rejects what the fast decoder took")
		assert.Equal(t, slow, asDecodedByJSON(fast, pairs))
	})
}

// asDecodedByJSON puts the slots the fast decoder returned apart in
// Slots, where encoding/json puts them.
func asDecodedByJSON(w wireEvent, pairs []int64) wireEvent {
	if pairs != nil {
		w.Slots = make([][]int64, len(pairs)/2)
		for i := range w.Slots {
			w.Slots[i] = pairs[2*i : 2*i+2 : 2*i+2]
		}
	}
	return w
}
