package diagsrc

import (
	"strings"

	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/pkg/diag/gsmtap"
	"github.com/m2ho/m2ho/pkg/diag/qcdiag"
	"github.com/m2ho/m2ho/pkg/diag/rrc"
)

// Reasons returns the error reasons the input uri names can count in its
// diag.Stats, so that each can be exported from the start; nil for a URI
// Open refuses.
func Reasons(uri string) []string {
	jsonReasons := []string{diag.ReasonJSONSyntax, diag.ReasonJSONVersion, diag.ReasonJSONType, diag.ReasonJSONTime,
		diag.ReasonJSONCell, diag.ReasonJSONField}
	// Inputs of RRC messages count what their decoder rejects.
	rrcReasons := []string{ReasonRRCDecode, rrc.ReasonMalformed, rrc.ReasonUnresolvedMeasID}
	diagReasons := []string{qcdiag.ReasonCRC, qcdiag.ReasonTruncatedFrame, qcdiag.ReasonOversizeFrame, qcdiag.ReasonBadEscape,
		qcdiag.ReasonMalformedLog, qcdiag.ReasonUnknownLogVersion, qcdiag.ReasonMalformedRRC, qcdiag.ReasonUnknownRRCPDU,
		qcdiag.ReasonRRCSegmentLost}
	gsmtapReasons := []string{gsmtap.ReasonMalformed, gsmtap.ReasonUnknownVersion, gsmtap.ReasonUnknownSubtype}
	scheme, _, _ := strings.Cut(uri, ":")
	switch scheme {
	case "unix":
		return append(jsonReasons, diag.ReasonUDPTruncated, diag.ReasonPeerNotAllowed)
	case "udp":
		return append(jsonReasons, diag.ReasonUDPTruncated)
	case "jsonl":
		return append(jsonReasons, diag.ReasonLineTooLong)
	case "qmdl":
		return append(diagReasons, rrcReasons...)
	case "serial":
		return append(append(diagReasons, rrcReasons...), ReasonSerialLost)
	case "gsmtap":
		return append(append(gsmtapReasons, rrcReasons...), diag.ReasonUDPTruncated)
	case "pcap":
		return append(append(gsmtapReasons, rrcReasons...), ReasonCaptureUndecodable)
	}
	return nil
}
