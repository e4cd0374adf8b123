package daemon

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

// notifier tells systemd how the service is doing over $NOTIFY_SOCKET
// (sd_notify(3)): READY=1 once the daemon serves, STATUS= lines, STOPPING=1
// and the watchdog's keep-alive pings. Without the variable, outside a
// Type=notify unit, it does nothing; its methods accept a nil receiver.
type notifier struct {
	conn *net.UnixConn
	// watchdog is the interval at which systemd expects a ping, half its
	// WatchdogSec so that one late ping is survived; 0 when the unit has
	// no watchdog.
	watchdog time.Duration
}

// notifierFromEnv connects to $NOTIFY_SOCKET. It returns nil without
// error when the variable is unset.
func notifierFromEnv() (*notifier, error) {
	addr := os.Getenv("NOTIFY_SOCKET")
	if addr == "" {
		return nil, nil
	}
	// An abstract socket is given with a leading @.
	if strings.HasPrefix(addr, "@") {
		addr = "\x00" + addr[1:]
	} else if !strings.HasPrefix(addr, "/") {
		return nil, fmt.Errorf("NOTIFY_SOCKET %q: only unix sockets are supported", addr)
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		return nil, fmt.Errorf("NOTIFY_SOCKET: %w", err)
	}
	n := &notifier{conn: conn}
	n.watchdog, err = watchdogInterval(os.Getenv("WATCHDOG_USEC"), os.Getenv("WATCHDOG_PID"), os.Getpid())
	if err != nil {
		conn.Close()
		return nil, err
	}
	return n, nil
}

// watchdogInterval is the ping interval for systemd's WATCHDOG_USEC and
// WATCHDOG_PID, 0 when the watchdog is off or meant for another process.
func watchdogInterval(usec, pid string, self int) (time.Duration, error) {
	if usec == "" {
		return 0, nil
	}
	if pid != "" && pid != strconv.Itoa(self) {
		return 0, nil
	}
	n, err := strconv.ParseUint(usec, 10, 63)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("WATCHDOG_USEC %q: not a positive number of microseconds", usec)
	}
	return time.Duration(n) * time.Microsecond / 2, nil
}

// send writes one notification; lines are KEY=value pairs.
func (n *notifier) send(lines ...string) error {
	if n == nil {
		return nil
	}
	_, err := n.conn.Write([]byte(strings.Join(lines, "\n")))
	return err
}

func (n *notifier) close() error {
	if n == nil {
		return nil
	}
	return n.conn.Close()
}

// errNotHealthy is what a runner's Healthy wraps when it stopped doing
// its work while still running.
var errNotHealthy = errors.New("not healthy")
