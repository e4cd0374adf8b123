package diagsrc

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/m2ho/m2ho/pkg/diag"
)

func TestReasons(t *testing.T) {
	for _, tt := range []struct {
		uri  string
		want []string
	}{
		{"unix:/run/m2ho/diag.sock", []string{diag.ReasonPeerNotAllowed, diag.ReasonJSONSyntax, diag.ReasonUDPTruncated}},
		{"udp://127.0.0.1:5599", []string{diag.ReasonJSONField, diag.ReasonUDPTruncated}},
		{"jsonl:-", []string{diag.ReasonJSONVersion, diag.ReasonLineTooLong}},
		{"qmdl:capture.qmdl", []string{"crc", "rrc_segment_lost", ReasonRRCDecode, "rrc_unresolved_meas_id"}},
		{"serial:/dev/wwan0qcdm0", []string{"crc", ReasonSerialLost}},
		{"gsmtap://127.0.0.1:4729", []string{"gsmtap_malformed", diag.ReasonUDPTruncated, "rrc_malformed"}},
		{"pcap:capture.pcap", []string{"gsmtap_subtype", ReasonCaptureUndecodable}},
	} {
		got := Reasons(tt.uri)
		for _, reason := range tt.want {
			assert.Contains(t, got, reason, tt.uri)
		}
		assert.Len(t, slices.Compact(slices.Sorted(slices.Values(got))), len(got), "%s: no reason twice", tt.uri)
	}
	assert.NotContains(t, Reasons("udp://127.0.0.1:5599"), diag.ReasonPeerNotAllowed, "only the unix socket checks its senders")
	assert.Nil(t, Reasons("tcp://127.0.0.1:1"))
}
