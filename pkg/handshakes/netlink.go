package handshakes

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

const (
	afInet  = unix.AF_INET
	afInet6 = unix.AF_INET6
	// nlaTypeMask strips NLA_F_NESTED and NLA_F_NET_BYTEORDER from an
	// attribute's type (include/uapi/linux/netlink.h).
	nlaTypeMask  = 0x3fff
	nlaHeaderLen = 4
	// dumpAttempts bounds the retries of a dump the kernel reports
	// interrupted: the table changed while it was read, and an entry
	// may be missing or repeated.
	dumpAttempts = 3
)

// errMalformed marks a message from the kernel that cannot be read.
var errMalformed = errors.New("malformed netlink message")

// requestData is a request's payload, already encoded.
type requestData []byte

func (r requestData) Len() int          { return len(r) }
func (r requestData) Serialize() []byte { return r }

// dumpFamilies dumps the table of what (sock_diag, conntrack) for IPv4,
// then IPv6, to the collector: a request of msgType with the payload
// request makes for the family, on the scanner's netlink socket of
// protocol. It stops at the first family that fails, with what the others
// found.
func (s *Scanner) dumpFamilies(what string, protocol int, msgType uint16, request func(family uint8) []byte,
	parse func(msg []byte, into collector), into collector) error {
	for _, family := range []uint8{afInet, afInet6} {
		if err := s.dump(protocol, msgType, request(family), parse, into); err != nil {
			return fmt.Errorf("%s dump of family %d: %w", what, family, err)
		}
	}
	return nil
}

// dump sends a dump request of msgType with payload on the scanner's
// netlink socket of protocol, and hands each reply's payload to parse,
// which adds what it reads into the collector. An interrupted dump is
// taken again, from what the collector's Found held before it; the last
// attempt's result stands, with an error that says so.
func (s *Scanner) dump(protocol int, msgType uint16, payload []byte, parse func(msg []byte, into collector), into collector) error {
	if _, ok := s.sockets[protocol]; !ok {
		// a request without the scanner's socket would open one in
		// the calling thread's namespace
		return s.socketErrs[protocol]
	}
	found := into.found
	before := *found
	for attempt := 1; ; attempt++ {
		req := nl.NewNetlinkRequest(int(msgType), unix.NLM_F_DUMP)
		req.Sockets = s.sockets
		req.AddData(requestData(payload))
		err := req.ExecuteIter(protocol, 0, func(msg []byte) bool {
			parse(msg, into)
			return true
		})
		if errors.Is(err, nl.ErrDumpInterrupted) && attempt < dumpAttempts {
			*found = before
			continue
		}
		return err
	}
}

// walkAttrs calls visit with the type (flags stripped) and value of each
// attribute in b. An attribute whose length runs past b, or bytes left over
// that cannot hold one, make b malformed.
func walkAttrs(b []byte, visit func(typ uint16, value []byte) error) error {
	for len(b) > 0 {
		if len(b) < nlaHeaderLen {
			return fmt.Errorf("%w: %d bytes left after the attributes", errMalformed, len(b))
		}
		length := int(binary.NativeEndian.Uint16(b))
		typ := binary.NativeEndian.Uint16(b[2:]) & nlaTypeMask
		if length < nlaHeaderLen || length > len(b) {
			return fmt.Errorf("%w: attribute %d of %d bytes in %d", errMalformed, typ, length, len(b))
		}
		if err := visit(typ, b[nlaHeaderLen:length]); err != nil {
			return err
		}
		aligned := (length + 3) &^ 3
		if aligned >= len(b) {
			return nil
		}
		b = b[aligned:]
	}
	return nil
}
