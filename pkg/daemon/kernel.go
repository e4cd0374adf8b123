package daemon

import (
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/m2ho/m2ho/pkg/datapath"
)

// minKernel is the oldest Linux release the programs load on (the
// README's requirements: bpf_loop, the BPF ring buffer, and the verifier
// features they rely on).
var minKernel = [2]int{5, 19}

// checkRunningKernel fails, with a line naming the running release and
// the one needed, on a kernel older than minKernel, where loading would
// fail with a verifier log that does not say why.
func checkRunningKernel() error {
	var uts unix.Utsname
	if err := unix.Uname(&uts); err != nil {
		return nil // the load itself reports whatever is wrong
	}
	return checkKernel(unix.ByteSliceToString(uts.Release[:]))
}

// checkKernel checks a release as uname(2) gives it (6.1.0-18-amd64).
// A release it cannot read passes: the load reports on it.
func checkKernel(release string) error {
	fields := strings.SplitN(release, ".", 3)
	if len(fields) < 2 {
		return nil
	}
	major, err1 := strconv.Atoi(fields[0])
	minor, err2 := strconv.Atoi(strings.TrimRightFunc(fields[1], func(r rune) bool { return r < '0' || r > '9' }))
	if err1 != nil || err2 != nil {
		return nil
	}
	if major > minKernel[0] || (major == minKernel[0] && minor >= minKernel[1]) {
		return nil
	}
	return kernelTooOld{release}
}

// kernelTooOld is a datapath.ErrUnsupported that says only what matters.
type kernelTooOld struct{ release string }

func (e kernelTooOld) Error() string {
	return fmt.Sprintf("Linux %s is too old: m2hod needs Linux %d.%d or newer", e.release, minKernel[0], minKernel[1])
}

func (kernelTooOld) Is(target error) bool { return target == datapath.ErrUnsupported }
