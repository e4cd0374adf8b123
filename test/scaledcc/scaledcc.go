// Package scaledcc registers the testbed's similarity-scaled CUBIC
// (bpf/cc/scubic.c) as a TCP congestion control, so that a sender on a
// link scaled down by s keeps the dynamics of a full-scale cell: its
// window is s times the full-scale window at every instant, and its
// recovery after a loss takes as long as on the real cell.
package scaledcc

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
)

// Family is the name of the congestion control in variants: "scubic"
// and "scubic+m2ho". Each registration gets a name of its own from it.
const Family = "scubic"

// nameMax is TCP_CA_NAME_MAX less the terminating NUL.
const nameMax = 15

// CC is one registration of similarity-scaled CUBIC.
type CC struct {
	name string
	objs scubicObjects
	link link.Link
}

// Register loads similarity-scaled CUBIC for scale s (0 < s <= 1) and
// registers it under a name of its own, which sockets select with
// TCP_CONGESTION. The registration ends with Close; sockets that still
// use it keep it until they close.
func Register(s float64) (*CC, error) {
	if !(s > 0 && s <= 1) {
		return nil, fmt.Errorf("scale %g is not in (0, 1]", s)
	}
	spec, err := loadScubic()
	if err != nil {
		return nil, fmt.Errorf("loading the scaled CUBIC object: %w", err)
	}
	ppm := uint32(math.Round(s * 1e6))
	if err := spec.Variables["scale_ppm"].Set(ppm); err != nil {
		return nil, fmt.Errorf("setting the scale: %w", err)
	}
	name, err := uniqueName(ppm)
	if err != nil {
		return nil, err
	}
	if err := setName(spec.Maps["scubic"], name); err != nil {
		return nil, err
	}
	cc := &CC{name: name}
	if err := spec.LoadAndAssign(&cc.objs, nil); err != nil {
		return nil, fmt.Errorf("loading scaled CUBIC (needs BPF struct_ops for TCP congestion control, Linux 5.6 or newer): %w", err)
	}
	cc.link, err = link.AttachStructOps(link.StructOpsOptions{Map: cc.objs.Scubic})
	if err != nil {
		cc.objs.Close()
		return nil, fmt.Errorf("registering %s: %w", name, err)
	}
	return cc, nil
}

// Name is the congestion control's name for TCP_CONGESTION.
func (c *CC) Name() string { return c.name }

// Close unregisters the congestion control.
func (c *CC) Close() error {
	return errors.Join(c.link.Close(), c.objs.Close())
}

// uniqueName is "scubic", the scale in thousandths and a random suffix:
// registrations are global, and two runs at once must not collide.
func uniqueName(ppm uint32) (string, error) {
	var b [2]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("naming the congestion control: %w", err)
	}
	name := fmt.Sprintf("%s%d_%s", Family, (ppm+500)/1000, hex.EncodeToString(b[:]))
	if len(name) > nameMax {
		return "", fmt.Errorf("congestion control name %q is longer than %d bytes", name, nameMax)
	}
	return name, nil
}

// setName writes name into the struct_ops value's name member.
func setName(m *ebpf.MapSpec, name string) error {
	if m == nil || len(m.Contents) != 1 {
		return errors.New("the scaled CUBIC object has no struct_ops value")
	}
	st, ok := btf.As[*btf.Struct](m.Value)
	if !ok {
		return fmt.Errorf("struct_ops value is %T, not a struct", m.Value)
	}
	value, ok := m.Contents[0].Value.([]byte)
	if !ok {
		return fmt.Errorf("struct_ops value holds %T, not bytes", m.Contents[0].Value)
	}
	for _, member := range st.Members {
		if member.Name != "name" {
			continue
		}
		off := int(member.Offset.Bytes())
		if off+nameMax+1 > len(value) {
			return errors.New("struct_ops value too short for its name")
		}
		field := value[off : off+nameMax+1]
		clear(field)
		copy(field, name)
		return nil
	}
	return errors.New("struct_ops value has no name member")
}
