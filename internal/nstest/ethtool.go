package nstest

import (
	"fmt"
	"slices"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Offload is a device feature, named by its legacy ethtool "set" command
// (linux/ethtool.h), which veth still honours. The ioctl needs no ethtool
// binary in the namespace.
type Offload uint32

// Offloads the tests and the testbed switch.
const (
	OffloadTxChecksum Offload = 0x17 // ETHTOOL_STXCSUM
	OffloadSG         Offload = 0x19 // ETHTOOL_SSG
	OffloadTSO        Offload = 0x1f // ETHTOOL_STSO
	OffloadGSO        Offload = 0x24 // ETHTOOL_SGSO
	OffloadGRO        Offload = 0x2c // ETHTOOL_SGRO
)

// SegmentationOffloads merge segments on receive or split them on send:
// with them off, packets on the wire are MTU-sized, as on a modem link.
var SegmentationOffloads = []Offload{OffloadGRO, OffloadGSO, OffloadTSO}

// ethtoolValue is struct ethtool_value.
type ethtoolValue struct {
	cmd  uint32
	data uint32
}

// ifreqData is struct ifreq with its union used as a data pointer.
type ifreqData struct {
	name [unix.IFNAMSIZ]byte
	data unsafe.Pointer
	_    [16]byte
}

// SetOffloads switches features of iface on or off in the calling
// thread's namespace, as "ethtool -K" would. Features depend on one
// another (TSO needs scatter-gather, which needs transmit checksumming),
// so they are switched off in the order given and on in the reverse.
func SetOffloads(iface string, on bool, features ...Offload) error {
	order := features
	var data uint32
	if on {
		order, data = slices.Clone(features), 1
		slices.Reverse(order)
	}
	for _, f := range order {
		if err := ethtool(iface, &ethtoolValue{cmd: uint32(f), data: data}); err != nil {
			return err
		}
	}
	return nil
}

// OffloadEnabled reports whether feature f of iface is on, in the calling
// thread's namespace. Each legacy "get" command precedes its "set".
func OffloadEnabled(iface string, f Offload) (bool, error) {
	value := ethtoolValue{cmd: uint32(f) - 1}
	if err := ethtool(iface, &value); err != nil {
		return false, err
	}
	return value.data != 0, nil
}

// ethtool runs one legacy ethtool command on iface, which reads or
// writes value.
func ethtool(iface string, value *ethtoolValue) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("ethtool socket: %w", err)
	}
	defer unix.Close(fd)
	var req ifreqData
	copy(req.name[:], iface)
	req.data = unsafe.Pointer(value)
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&req))); errno != 0 {
		return fmt.Errorf("ethtool command %#x on %s: %w", value.cmd, iface, errno)
	}
	return nil
}
