// Package nsexec runs code in another network namespace. Interface
// indexes, and the netlink sockets and BPF links made from them, belong to
// the namespace of the thread that asks, so such work has to run on a
// thread that joined the namespace.
package nsexec

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/vishvananda/netns"
)

// Run runs fn on an OS thread that has joined ns. Sockets opened inside fn
// stay in ns and may be used from any goroutine after fn returns.
// Goroutines started by fn do not inherit the namespace. A thread already
// in ns runs fn as it is: a process confined to its namespace (systemd's
// RestrictNamespaces=) may not call setns at all.
func Run(ns netns.NsHandle, fn func() error) error {
	runtime.LockOSThread()
	origin, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("current network namespace: %w", err)
	}
	defer origin.Close()
	if origin.Equal(ns) {
		defer runtime.UnlockOSThread()
		return fn()
	}
	if err := netns.Set(ns); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("enter network namespace: %w", err)
	}
	fnErr := fn()
	if err := netns.Set(origin); err != nil {
		// Leave the thread locked: the runtime terminates it when this
		// goroutine exits instead of reusing a thread in the wrong namespace.
		return errors.Join(fnErr, fmt.Errorf("leave network namespace: %w", err))
	}
	runtime.UnlockOSThread()
	return fnErr
}
