package traffic

import (
	"fmt"
	"os"
	"sync/atomic"

	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// CaptureSnaplen keeps headers and a little payload: enough for TCP
// analysis without storing the bulk data.
const CaptureSnaplen = 128

// Capture writes every frame seen on an interface to a pcap file, with an
// AF_PACKET socket; no external capture tool is needed.
type Capture struct {
	handle *pcapgo.EthernetHandle
	file   *os.File
	done   chan struct{}
	closed atomic.Bool
	// Packets and Errors are valid after Close.
	Packets int
	Errors  int
}

// StartCapture opens iface inside ns and writes to path until Close.
func StartCapture(ns Namespace, iface, path string) (*Capture, error) {
	c := &Capture{done: make(chan struct{})}
	if err := ns(func() error {
		var err error
		c.handle, err = pcapgo.NewEthernetHandle(iface)
		return err
	}); err != nil {
		return nil, fmt.Errorf("capture on %s: %w", iface, err)
	}
	if err := c.handle.SetCaptureLength(CaptureSnaplen); err != nil {
		c.handle.Close()
		return nil, fmt.Errorf("capture length: %w", err)
	}
	f, err := os.Create(path)
	if err != nil {
		c.handle.Close()
		return nil, fmt.Errorf("capture file: %w", err)
	}
	c.file = f
	w := pcapgo.NewWriter(f)
	if err := w.WriteFileHeader(CaptureSnaplen, layers.LinkTypeEthernet); err != nil {
		c.handle.Close()
		f.Close()
		return nil, fmt.Errorf("pcap header: %w", err)
	}
	go func() {
		defer close(c.done)
		for {
			data, ci, err := c.handle.ReadPacketData()
			if c.closed.Load() {
				return
			}
			if err != nil {
				c.Errors++
				continue
			}
			if err := w.WritePacket(ci, data); err != nil {
				c.Errors++
				continue
			}
			c.Packets++
		}
	}()
	return c, nil
}

// Close stops the capture and closes the file.
func (c *Capture) Close() error {
	c.closed.Store(true)
	c.handle.Close()
	<-c.done
	if err := c.file.Close(); err != nil {
		return fmt.Errorf("closing capture file: %w", err)
	}
	return nil
}
