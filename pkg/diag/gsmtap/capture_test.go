package gsmtap_test

import (
	"bytes"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/pkg/diag/gsmtap"
)

// udpPacket serialises payload in UDP to port over IPv4 or IPv6, with an
// Ethernet header when ethernet is set.
func udpPacket(t *testing.T, ipv6, ethernet bool, port uint16, payload []byte) []byte {
	t.Helper()
	udp := &layers.UDP{SrcPort: 40000, DstPort: layers.UDPPort(port)}
	var stack []gopacket.SerializableLayer
	etherType := layers.EthernetTypeIPv4
	if ipv6 {
		ip := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolUDP, SrcIP: net.ParseIP("::1"), DstIP: net.ParseIP("::2")}
		require.NoError(t, udp.SetNetworkLayerForChecksum(ip))
		stack = append(stack, ip)
		etherType = layers.EthernetTypeIPv6
	} else {
		ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: net.IPv4(127, 0, 0, 1), DstIP: net.IPv4(127, 0, 0, 2)}
		require.NoError(t, udp.SetNetworkLayerForChecksum(ip))
		stack = append(stack, ip)
	}
	if ethernet {
		eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}, EthernetType: etherType}
		stack = append([]gopacket.SerializableLayer{eth}, stack...)
	}
	stack = append(stack, udp, gopacket.Payload(payload))
	buf := gopacket.NewSerializeBuffer()
	require.NoError(t, gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, stack...))
	return buf.Bytes()
}

func TestReadCaptureLinkTypes(t *testing.T) {
	at := time.Date(2024, 2, 3, 4, 5, 6, 7000, time.UTC)
	payload := v2(0x0D, 100, 1, []byte{1, 2, 3})
	tests := []struct {
		name     string
		linkType layers.LinkType
		ipv6     bool
		ethernet bool
		ng       bool
	}{
		{name: "pcap raw ipv4", linkType: 228},
		{name: "pcap raw ipv6", linkType: 229, ipv6: true},
		{name: "pcap ethernet ipv4", linkType: layers.LinkTypeEthernet, ethernet: true},
		{name: "pcapng ethernet ipv6", linkType: layers.LinkTypeEthernet, ethernet: true, ipv6: true, ng: true},
		{name: "pcapng raw", linkType: layers.LinkTypeRaw, ng: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var file bytes.Buffer
			pkts := [][]byte{
				udpPacket(t, tc.ipv6, tc.ethernet, gsmtap.Port, payload),
				udpPacket(t, tc.ipv6, tc.ethernet, 53, []byte("dns")),
				udpPacket(t, tc.ipv6, tc.ethernet, gsmtap.QCSuperNRPort, []byte{9}),
			}
			write := func(w interface {
				WritePacket(gopacket.CaptureInfo, []byte) error
			}) {
				for _, p := range pkts {
					require.NoError(t, w.WritePacket(gopacket.CaptureInfo{Timestamp: at, CaptureLength: len(p), Length: len(p)}, p))
				}
			}
			if tc.ng {
				w, err := pcapgo.NewNgWriter(&file, tc.linkType)
				require.NoError(t, err)
				write(w)
				require.NoError(t, w.Flush())
			} else {
				w := pcapgo.NewWriterNanos(&file)
				require.NoError(t, w.WriteFileHeader(65535, tc.linkType))
				write(w)
			}
			var got []gsmtap.Datagram
			skipped, err := gsmtap.ReadCapture(&file, func(d gsmtap.Datagram) error {
				d.Payload = bytes.Clone(d.Payload)
				got = append(got, d)
				return nil
			})
			require.NoError(t, err)
			assert.Zero(t, skipped)
			require.Len(t, got, 3)
			dst := netip.MustParseAddr("127.0.0.2")
			if tc.ipv6 {
				dst = netip.MustParseAddr("::2")
			}
			assert.Equal(t, gsmtap.Datagram{Time: at, DstAddr: dst, DstPort: gsmtap.Port, Payload: payload}, got[0])
			assert.Equal(t, uint16(53), got[1].DstPort)
			assert.Equal(t, uint16(gsmtap.QCSuperNRPort), got[2].DstPort)
		})
	}
}

func TestReadCaptureNotACapture(t *testing.T) {
	_, err := gsmtap.ReadCapture(bytes.NewReader([]byte("definitely not a pcap file")), func(gsmtap.Datagram) error { return nil })
	assert.Error(t, err)
	_, err = gsmtap.ReadCapture(bytes.NewReader(nil), func(gsmtap.Datagram) error { return nil })
	assert.Error(t, err)
}

func TestSubscription(t *testing.T) {
	base := gsmtap.SCATBaseAddr
	tests := []struct {
		base, dst string
		want      uint8
	}{
		{"127.0.0.1", "127.0.0.1", 0},
		{"127.0.0.1", "127.0.0.2", 1},
		{"127.0.0.1", "0.0.0.0", 0}, // QCSuper's pcap files
		{"127.0.0.1", "127.0.1.2", 0},
		{"127.0.0.5", "127.0.0.4", 0},
		{"10.0.0.7", "10.0.0.8", 1},
		{"127.0.0.1", "::1", 0},
	}
	for _, tc := range tests {
		assert.Equal(t, tc.want, gsmtap.Subscription(netip.MustParseAddr(tc.base), netip.MustParseAddr(tc.dst)), "%s to %s", tc.base, tc.dst)
	}
	assert.Equal(t, "127.0.0.1", base.String())
}
