package diagsrc

import (
	"context"
	"errors"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// inputFile is a file input opened by openInput. Its reads end with an
// error as soon as the context it was opened with is done.
type inputFile struct {
	*os.File
	// unwatch stops the context watch that interrupts reads.
	unwatch func() bool
}

// Close stops watching the context and closes the file.
func (f *inputFile) Close() error {
	f.unwatch()
	return f.File.Close()
}

// openInput opens the file at path for reading, as os.Open does, except
// that nothing blocks beyond the reach of ctx.
//
// os.Open of a named pipe blocks in open(2) until a writer opens the other
// end, and no context can end that wait: a daemon told to stop would hang.
// Here the pipe is opened without blocking, and openInput waits in the
// runtime poller, which ctx can interrupt, until a writer has connected and
// either written data or closed its end. Reads then run through the poller
// too, so a writer that stays idle does not hold a read past ctx either.
// The pipe is read until its writer closes it, as with os.Open.
//
// Once ctx is done, the wait and every read fail; openInput then returns
// ctx.Err(). Regular files read as they would after os.Open.
func openInput(ctx context.Context, path string) (io.ReadCloser, error) {
	var fd int
	err := retryEINTR(func() (err error) {
		fd, err = unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		return err
	})
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	var st unix.Stat_t
	if err := retryEINTR(func() error { return unix.Fstat(fd, &st) }); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	fifo := st.Mode&unix.S_IFMT == unix.S_IFIFO
	if typ := st.Mode & unix.S_IFMT; typ == unix.S_IFREG || typ == unix.S_IFDIR {
		// The poller cannot watch these, and os.Open leaves them blocking.
		if err := unix.SetNonblock(fd, false); err != nil {
			unix.Close(fd)
			return nil, &os.PathError{Op: "open", Path: path, Err: err}
		}
	}
	// A non-blocking descriptor is registered with the poller when it can
	// be, which is what makes read deadlines, and so ctx, apply to it.
	f := os.NewFile(uintptr(fd), path)
	in := &inputFile{File: f}
	in.unwatch = context.AfterFunc(ctx, func() {
		// A deadline in the past fails the pending read and every later
		// one. Files the poller does not handle (regular files) refuse
		// deadlines, but their reads do not block indefinitely.
		_ = f.SetReadDeadline(time.Unix(1, 0))
	})
	if fifo {
		if err := waitForWriter(f); err != nil {
			in.Close()
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, &os.PathError{Op: "wait for a writer", Path: path, Err: err}
		}
	}
	return in, nil
}

// waitForWriter waits until the pipe f, opened without blocking, has data
// or has been closed by a writer. Before any writer has connected, a read
// would return end of file at once, which is why reading cannot start
// earlier; and Linux reports no hang-up on such a pipe until a writer has
// come and gone, so readiness means a writer has connected.
func waitForWriter(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var pollErr error
	err = rc.Read(func(fd uintptr) bool {
		// RawConn.Read forgets readiness the poller recorded before it was
		// called (such as data already there when f was registered), then
		// waits for a new edge whenever this returns false. Asking the
		// kernel directly, each time, cannot miss data already queued.
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		var n int
		pollErr = retryEINTR(func() (err error) {
			n, err = unix.Poll(fds, 0)
			return err
		})
		return pollErr != nil || n > 0
	})
	if err != nil {
		return err
	}
	return pollErr
}

func retryEINTR(fn func() error) error {
	for {
		if err := fn(); !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}
