package qcdiag

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// OpenSerial opens a modem's DIAG port. A tty (USB modems' /dev/ttyUSB*)
// is put in raw mode: 8N1, no echo, no line editing, no flow control and
// no byte translation, so that HDLC frames pass untouched. A character
// device that is not a tty, as the Linux WWAN subsystem gives PCIe
// modems (/dev/wwan0qcdm0 on Quectel RM5xx, Sierra EM9xxx, Foxconn T99W),
// carries the bytes as they are and is used as it is. Reads block until
// at least one byte arrives and honour read deadlines where the device
// can be polled.
func OpenSerial(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, fmt.Errorf("open diag port: %w", err)
	}
	// Fd would switch the file to blocking mode and lose deadlines and
	// Close-unblocks-Read; Control keeps it in the runtime poller.
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("diag port %s: %w", path, err)
	}
	var rawErr error
	if err := rc.Control(func(fd uintptr) { rawErr = makeRaw(int(fd)) }); err != nil {
		rawErr = err
	}
	if rawErr != nil {
		f.Close()
		return nil, fmt.Errorf("diag port %s: %w", path, rawErr)
	}
	return f, nil
}

// makeRaw puts a tty in raw mode and leaves any other character device
// alone.
func makeRaw(fd int) error {
	t, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if errors.Is(err, unix.ENOTTY) {
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return fmt.Errorf("not a tty: %w", err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFCHR {
			return errors.New("neither a tty nor a character device")
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("not a tty: %w", err)
	}
	t.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON | unix.IXOFF
	t.Oflag &^= unix.OPOST
	t.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	t.Cflag &^= unix.CSIZE | unix.PARENB | unix.CRTSCTS | unix.CBAUD
	// USB modems ignore the rate; 115200 suits a real UART.
	t.Cflag |= unix.CS8 | unix.CLOCAL | unix.CREAD | unix.B115200
	t.Ispeed, t.Ospeed = unix.B115200, unix.B115200
	t.Cc[unix.VMIN] = 1
	t.Cc[unix.VTIME] = 0
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, t); err != nil {
		return fmt.Errorf("set raw mode: %w", err)
	}
	return nil
}
