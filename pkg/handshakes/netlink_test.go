package handshakes

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/m2ho/m2ho/internal/nstest"
)

// nlmsg is a netlink message of type typ, padded to the alignment.
func nlmsg(typ, flags uint16, seq, port uint32, body ...byte) []byte {
	b := make([]byte, nlmsgAlign(unix.NLMSG_HDRLEN+len(body)))
	binary.NativeEndian.PutUint32(b[0:], uint32(unix.NLMSG_HDRLEN+len(body)))
	binary.NativeEndian.PutUint16(b[4:], typ)
	binary.NativeEndian.PutUint16(b[6:], flags)
	binary.NativeEndian.PutUint32(b[8:], seq)
	binary.NativeEndian.PutUint32(b[12:], port)
	copy(b[unix.NLMSG_HDRLEN:], body)
	return b
}

// errnoBody is the body of an NLMSG_ERROR or NLMSG_DONE carrying -errno.
func errnoBody(errno unix.Errno) []byte {
	return binary.NativeEndian.AppendUint32(nil, uint32(-int32(errno)))
}

// TestDumpMessages walks datagrams as the kernel may send them: the
// entries of a dump, its end, an error, and the leftovers of a dump
// given up on, which belong to an earlier sequence number.
func TestDumpMessages(t *testing.T) {
	const seq, port, entry = 7, 4242, 100
	join := func(msgs ...[]byte) []byte {
		var b []byte
		for _, m := range msgs {
			b = append(b, m...)
		}
		return b
	}
	data := func(payload ...byte) []byte { return nlmsg(entry, unix.NLM_F_MULTI, seq, port, payload...) }
	tests := []struct {
		name            string
		datagram        []byte
		wantVisits      [][]byte
		wantDone        bool
		wantInterrupted bool
		wantErr         error
	}{
		{name: "entries", datagram: join(data(1, 2, 3), data(4)), wantVisits: [][]byte{{1, 2, 3}, {4}}},
		{name: "entries, then the end", datagram: join(data(1), nlmsg(unix.NLMSG_DONE, unix.NLM_F_MULTI, seq, port, 0, 0, 0, 0)),
			wantVisits: [][]byte{{1}}, wantDone: true},
		{name: "an end without a body", datagram: nlmsg(unix.NLMSG_DONE, 0, seq, port), wantDone: true},
		{name: "an end with an error", datagram: nlmsg(unix.NLMSG_DONE, 0, seq, port, errnoBody(unix.ENOBUFS)...),
			wantDone: true, wantErr: unix.ENOBUFS},
		{name: "an error", datagram: nlmsg(unix.NLMSG_ERROR, 0, seq, port, errnoBody(unix.EOPNOTSUPP)...),
			wantDone: true, wantErr: unix.EOPNOTSUPP},
		{name: "an earlier dump's leftovers", datagram: join(nlmsg(entry, unix.NLM_F_MULTI, seq-1, port, 9),
			nlmsg(unix.NLMSG_DONE, 0, seq-1, port), data(1)), wantVisits: [][]byte{{1}}},
		{name: "another port's", datagram: nlmsg(entry, 0, seq, port+1, 9)},
		{name: "interrupted", datagram: join(nlmsg(entry, unix.NLM_F_MULTI|unix.NLM_F_DUMP_INTR, seq, port, 1)),
			wantVisits: [][]byte{{1}}, wantInterrupted: true},
		{name: "a no-op", datagram: join(nlmsg(unix.NLMSG_NOOP, 0, seq, port), data(1)), wantVisits: [][]byte{{1}}},
		{name: "a header cut short", datagram: join(data(1), make([]byte, 8)), wantVisits: [][]byte{{1}},
			wantDone: true, wantErr: errMalformed},
		{name: "a length past the datagram", datagram: data(1)[:unix.NLMSG_HDRLEN], wantDone: true, wantErr: errMalformed},
		{name: "a length under the header", datagram: func() []byte {
			b := data(1)
			binary.NativeEndian.PutUint32(b, 4)
			return b
		}(), wantDone: true, wantErr: errMalformed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := &dumpSocket{seq: seq, port: port}
			var visits [][]byte
			interrupted := false
			done, err := s.messages(tc.datagram, &interrupted, func(msg []byte) {
				visits = append(visits, append([]byte(nil), msg...))
			})
			if tc.wantErr != nil {
				assert.ErrorIs(t, err, tc.wantErr)
			} else {
				assert.NoError(t, err)
			}
			assert.Equal(t, tc.wantDone, done)
			assert.Equal(t, tc.wantInterrupted, interrupted)
			assert.Equal(t, tc.wantVisits, visits)
		})
	}
}

// TestDumpSkipsAnAbandonedDump leaves the reply to a dump unread, as a
// dump given up on mid-way does, then scans. The kernel refuses a second
// dump while the first runs; the scan reads the first to its end, asks
// again, and finds each connection once.
func TestDumpSkipsAnAbandonedDump(t *testing.T) {
	nstest.RequireRoot(t)
	ns := nstest.NewNS(t, "hs")
	require.NoError(t, ns.AddAddr("lo", "10.99.0.1/32"))
	require.NoError(t, ns.AddAddr("lo", "10.99.0.2/32"))
	client, server, _ := connect(t, ns, netip.MustParseAddr("10.99.0.2"), netip.MustParseAddr("10.99.0.1"))
	scanner := scannerIn(t, ns, nil)

	diag := scanner.sockets[unix.NETLINK_INET_DIAG]
	diag.mu.Lock()
	err := diag.request(unix.SOCK_DIAG_BY_FAMILY, socketRequest(afInet))
	diag.mu.Unlock()
	require.NoError(t, err)

	found, err := scanner.Sockets()
	require.NoError(t, err)
	assert.Zero(t, found.Malformed)
	ends := byEnds(t, found.Handshakes)
	assert.Len(t, ends, 2, "%+v", found.Handshakes)
	assert.Contains(t, ends, client)
	assert.Contains(t, ends, server)
}

// TestClosedScanner closes a scanner twice, which leaves other files'
// descriptors alone, and scans with it: the scan fails and says why.
func TestClosedScanner(t *testing.T) {
	nstest.RequireRoot(t)
	scanner := scannerIn(t, nstest.NewNS(t, "hs"), nil)
	scanner.Close()
	scanner.Close()
	_, err := scanner.Sockets()
	assert.ErrorIs(t, err, errSocketClosed)
}

// FuzzDumpMessages walks whatever a datagram holds: no input may panic
// the walk, and every body it hands on lies inside the datagram.
func FuzzDumpMessages(f *testing.F) {
	f.Add(append(nlmsg(100, unix.NLM_F_MULTI, 1, 1, 1, 2, 3), nlmsg(unix.NLMSG_DONE, 0, 1, 1)...))
	f.Add(nlmsg(unix.NLMSG_ERROR, 0, 1, 1, errnoBody(unix.EBUSY)...))
	f.Add(nlmsg(100, unix.NLM_F_DUMP_INTR, 1, 1, 9)[:unix.NLMSG_HDRLEN+2])
	f.Fuzz(func(t *testing.T, datagram []byte) {
		s := &dumpSocket{seq: 1, port: 1}
		interrupted := false
		visited := 0
		done, err := s.messages(datagram, &interrupted, func(msg []byte) {
			visited += unix.NLMSG_HDRLEN + len(msg)
		})
		assert.LessOrEqual(t, visited, len(datagram))
		if err != nil {
			assert.True(t, done, "an error ends the dump")
		}
		_, _ = endsADump(datagram)
	})
}
