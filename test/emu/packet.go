package emu

import (
	"encoding/binary"
	"sync"
	"time"
)

// Packet is one Ethernet frame moving through the emulator.
type Packet struct {
	Frame []byte
	// Size is what the packet costs in capacity and buffer space: its IP
	// length (the radio carries IP packets, not Ethernet frames).
	Size int
	// Arrived is when the emulator read it.
	Arrived time.Duration
	TCP     TCPHeader

	release time.Duration // end of its one-way delay
	held    *HeldPacket   // set when a context release holds it back
}

// packetPool recycles packets and their frame buffers: at tens of
// thousands of packets per second, allocating each one keeps the garbage
// collector busy, and its pauses stall the real-time packet path.
var packetPool = sync.Pool{New: func() any { return &Packet{Frame: make([]byte, maxFrame)} }}

// newPacket returns a cleared packet whose Frame has room for maxFrame.
func newPacket() *Packet {
	p := packetPool.Get().(*Packet)
	p.Frame = p.Frame[:maxFrame]
	return p
}

// recyclePacket returns a packet nobody references any more.
func recyclePacket(p *Packet) {
	*p = Packet{Frame: p.Frame[:0]}
	packetPool.Put(p)
}

// TCP flag bits.
const (
	tcpFIN = 0x01
	tcpSYN = 0x02
	tcpRST = 0x04
	tcpACK = 0x10
)

// FlowKey names a TCP connection in its downlink direction (server to UE).
type FlowKey struct {
	Server, UE         [16]byte
	ServerPort, UEPort uint16
}

// TCPHeader is what the emulator reads of a TCP segment.
type TCPHeader struct {
	Valid   bool
	Flow    FlowKey
	Seq     uint32
	Ack     uint32
	Flags   uint8
	Payload int
}

const (
	etherHeaderLen = 14
	etherTypeIPv4  = 0x0800
	etherTypeIPv6  = 0x86DD
	etherTypeVLAN  = 0x8100
	protoTCP       = 6
)

// ParseFrame reads an Ethernet frame. isIP is false for anything that is
// not IPv4 or IPv6 (ARP and the like), which the emulator passes without
// emulating the radio. size is the IP length. downlink tells which end of
// the flow key the source address is.
func ParseFrame(frame []byte, downlink bool) (size int, isIP bool, tcp TCPHeader) {
	if len(frame) < etherHeaderLen {
		return len(frame), false, tcp
	}
	etherType := binary.BigEndian.Uint16(frame[12:14])
	l3 := frame[etherHeaderLen:]
	if etherType == etherTypeVLAN && len(frame) >= etherHeaderLen+4 {
		etherType = binary.BigEndian.Uint16(frame[16:18])
		l3 = frame[etherHeaderLen+4:]
	}
	var src, dst [16]byte
	var l4 []byte
	var proto uint8
	switch etherType {
	case etherTypeIPv4:
		if len(l3) < 20 || l3[0]>>4 != 4 {
			return len(l3), false, tcp
		}
		ihl := int(l3[0]&0x0f) * 4
		total := int(binary.BigEndian.Uint16(l3[2:4]))
		if ihl < 20 || total < ihl || total > len(l3) {
			return len(l3), false, tcp
		}
		size = total
		copy(src[12:], l3[12:16])
		copy(dst[12:], l3[16:20])
		proto = l3[9]
		fragmented := binary.BigEndian.Uint16(l3[6:8])&0x3fff != 0
		if fragmented {
			return size, true, tcp
		}
		l4 = l3[ihl:total]
	case etherTypeIPv6:
		if len(l3) < 40 || l3[0]>>4 != 6 {
			return len(l3), false, tcp
		}
		payload := int(binary.BigEndian.Uint16(l3[4:6]))
		if 40+payload > len(l3) {
			return len(l3), false, tcp
		}
		size = 40 + payload
		copy(src[:], l3[8:24])
		copy(dst[:], l3[24:40])
		proto = l3[6]
		l4 = l3[40:size]
	default:
		return len(frame), false, tcp
	}
	if proto != protoTCP || len(l4) < 20 {
		return size, true, tcp
	}
	dataOff := int(l4[12]>>4) * 4
	if dataOff < 20 || dataOff > len(l4) {
		return size, true, tcp
	}
	tcp.Valid = true
	sport := binary.BigEndian.Uint16(l4[0:2])
	dport := binary.BigEndian.Uint16(l4[2:4])
	if downlink {
		tcp.Flow = FlowKey{Server: src, UE: dst, ServerPort: sport, UEPort: dport}
	} else {
		tcp.Flow = FlowKey{Server: dst, UE: src, ServerPort: dport, UEPort: sport}
	}
	tcp.Seq = binary.BigEndian.Uint32(l4[4:8])
	tcp.Ack = binary.BigEndian.Uint32(l4[8:12])
	tcp.Flags = l4[13]
	tcp.Payload = len(l4) - dataOff
	return size, true, tcp
}

// packetQueue is a droptail FIFO limited in bytes.
type packetQueue struct {
	pkts  []*Packet
	head  int
	bytes int
	limit int
}

func (q *packetQueue) len() int { return len(q.pkts) - q.head }

// push appends p, or reports false (a drop) when it does not fit.
func (q *packetQueue) push(p *Packet) bool {
	if q.bytes+p.Size > q.limit {
		return false
	}
	if q.head > 0 && q.head == len(q.pkts) {
		q.pkts = q.pkts[:0]
		q.head = 0
	}
	q.pkts = append(q.pkts, p)
	q.bytes += p.Size
	return true
}

func (q *packetQueue) peek() *Packet {
	if q.head == len(q.pkts) {
		return nil
	}
	return q.pkts[q.head]
}

func (q *packetQueue) pop() *Packet {
	p := q.pkts[q.head]
	q.pkts[q.head] = nil
	q.head++
	q.bytes -= p.Size
	if q.head == len(q.pkts) {
		q.pkts = q.pkts[:0]
		q.head = 0
	} else if q.head > 1024 && q.head*2 > len(q.pkts) {
		n := copy(q.pkts, q.pkts[q.head:])
		clear(q.pkts[n:])
		q.pkts = q.pkts[:n]
		q.head = 0
	}
	return p
}

// drain removes and returns every packet in order.
func (q *packetQueue) drain() []*Packet {
	out := append([]*Packet(nil), q.pkts[q.head:]...)
	clear(q.pkts)
	q.pkts = q.pkts[:0]
	q.head = 0
	q.bytes = 0
	return out
}
