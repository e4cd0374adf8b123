package diagsrc

import (
	"slices"
	"strings"

	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/pkg/diag/gsmtap"
	"github.com/m2ho/m2ho/pkg/diag/qcdiag"
	"github.com/m2ho/m2ho/pkg/diag/rrc"
)

// scheme is one kind of diag input: how Open opens it, and the error
// reasons its diag.Stats can count.
type scheme struct {
	name    string
	open    func(uri, rest string, opts Options) (diag.Source, error)
	reasons []string
}

// Error reasons shared by kinds of input.
var (
	jsonReasons = []string{diag.ReasonJSONSyntax, diag.ReasonJSONVersion, diag.ReasonJSONType, diag.ReasonJSONTime,
		diag.ReasonJSONCell, diag.ReasonJSONField}
	// Inputs of RRC messages count what their decoder rejects.
	rrcReasons    = []string{ReasonRRCDecode, rrc.ReasonMalformed, rrc.ReasonUnresolvedMeasID}
	qcdiagReasons = []string{qcdiag.ReasonCRC, qcdiag.ReasonTruncatedFrame, qcdiag.ReasonOversizeFrame, qcdiag.ReasonBadEscape,
		qcdiag.ReasonMalformedLog, qcdiag.ReasonUnknownLogVersion, qcdiag.ReasonMalformedRRC, qcdiag.ReasonUnknownRRCPDU,
		qcdiag.ReasonRRCSegmentLost}
	gsmtapReasons = []string{gsmtap.ReasonMalformed, gsmtap.ReasonUnknownVersion, gsmtap.ReasonUnknownSubtype}
)

// schemes are the inputs Open knows, in the order its usage names them.
var schemes = []scheme{
	{name: "unix", reasons: slices.Concat(jsonReasons, []string{diag.ReasonUDPTruncated, diag.ReasonPeerNotAllowed}),
		open: func(uri, rest string, opts Options) (diag.Source, error) {
			return diag.ListenUnixgram(uri, rest, opts.Stats)
		}},
	{name: "udp", reasons: slices.Concat(jsonReasons, []string{diag.ReasonUDPTruncated}),
		open: func(uri, rest string, opts Options) (diag.Source, error) {
			addr, err := listenAddr(uri, rest, DefaultUDPPort)
			if err != nil {
				return nil, err
			}
			return diag.ListenUDP(uri, addr, opts.Stats)
		}},
	{name: "jsonl", reasons: slices.Concat(jsonReasons, []string{diag.ReasonLineTooLong}),
		open: func(uri, rest string, opts Options) (diag.Source, error) {
			if rest == "-" {
				return diag.NewJSONLSource(uri, opts.Stdin, opts.Stats), nil
			}
			return &jsonlFile{name: uri, path: rest, stats: opts.Stats}, nil
		}},
	{name: "qmdl", reasons: slices.Concat(qcdiagReasons, rrcReasons),
		open: func(uri, rest string, opts Options) (diag.Source, error) {
			return newQMDLSource(uri, rest, opts)
		}},
	{name: "serial", reasons: slices.Concat(qcdiagReasons, rrcReasons, []string{ReasonSerialLost}),
		open: func(uri, rest string, opts Options) (diag.Source, error) {
			return newSerialSource(uri, rest, opts), nil
		}},
	{name: "gsmtap", reasons: slices.Concat(gsmtapReasons, rrcReasons, []string{diag.ReasonUDPTruncated}),
		open: func(uri, rest string, opts Options) (diag.Source, error) {
			addr, err := listenAddr(uri, rest, gsmtap.Port)
			if err != nil {
				return nil, err
			}
			return listenGSMTAP(uri, addr, opts)
		}},
	{name: "pcap", reasons: slices.Concat(gsmtapReasons, rrcReasons, []string{ReasonCaptureUndecodable}),
		open: func(uri, rest string, opts Options) (diag.Source, error) {
			return newPcapSource(uri, rest, opts)
		}},
}

func schemeOf(name string) (scheme, bool) {
	i := slices.IndexFunc(schemes, func(s scheme) bool { return s.name == name })
	if i < 0 {
		return scheme{}, false
	}
	return schemes[i], true
}

// schemeNames lists the schemes, space-separated.
func schemeNames() string {
	names := make([]string, len(schemes))
	for i, s := range schemes {
		names[i] = s.name
	}
	return strings.Join(names, " ")
}

// Reasons returns the error reasons the input uri names can count in its
// diag.Stats, so that each can be exported from the start; nil for a URI
// Open refuses.
func Reasons(uri string) []string {
	name, _, _ := strings.Cut(uri, ":")
	sc, ok := schemeOf(name)
	if !ok {
		return nil
	}
	return slices.Clone(sc.reasons)
}
