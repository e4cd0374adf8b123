package topo

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Legacy ethtool "set" commands (linux/ethtool.h); veth still honours them.
const (
	ethtoolSetTxChecksum = 0x17 // ETHTOOL_STXCSUM
	ethtoolSetSG         = 0x19 // ETHTOOL_SSG
	ethtoolSetTSO        = 0x1f // ETHTOOL_STSO
	ethtoolSetGSO        = 0x24 // ETHTOOL_SGSO
	ethtoolSetGRO        = 0x2c // ETHTOOL_SGRO
)

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

// disableOffloads turns off segmentation and receive offloads and transmit
// checksumming on iface (in the calling thread's namespace), as
// "ethtool -K iface tx off sg off tso off gso off gro off" would: the
// emulator must see MTU-sized packets with complete checksums, since the
// frames it relays are re-injected and no longer carry the sender's
// checksum-offload state.
func disableOffloads(iface string) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("ethtool socket: %w", err)
	}
	defer unix.Close(fd)
	for _, cmd := range []uint32{ethtoolSetGRO, ethtoolSetGSO, ethtoolSetTSO, ethtoolSetSG, ethtoolSetTxChecksum} {
		value := ethtoolValue{cmd: cmd}
		var req ifreqData
		copy(req.name[:], iface)
		req.data = unsafe.Pointer(&value)
		if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&req))); errno != 0 {
			return fmt.Errorf("ethtool command %#x on %s: %w", cmd, iface, errno)
		}
	}
	return nil
}
