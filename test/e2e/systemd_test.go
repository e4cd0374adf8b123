package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/internal/logbuf"
	"github.com/m2ho/m2ho/internal/nstest"
	"github.com/m2ho/m2ho/pkg/diag"
)

// systemdBinary is the service manager TestSystemdUnit boots.
const systemdBinary = "/lib/systemd/systemd"

// serviceCapabilities are the capabilities deploy/m2hod.service grants:
// CAP_NET_ADMIN (12), CAP_PERFMON (38) and CAP_BPF (39).
const serviceCapabilities = 1<<12 | 1<<38 | 1<<39

// DynamicUser= picks its users from this range (systemd's
// DYNAMIC_UID_MIN and DYNAMIC_UID_MAX).
const dynamicUIDMin, dynamicUIDMax = 61184, 65519

// systemdContainer is systemd running as PID 1 of its own PID, mount, UTS
// and cgroup namespaces, in the bed's ue network namespace.
type systemdContainer struct {
	t      *testing.T
	cmd    *exec.Cmd
	cgroup string // the container's cgroup, seen from the host
	out    string // the service's log
	exited chan struct{}
}

// startSystemd boots a container (testdata/systemd-container.sh) in which
// deploy/m2hod.service and deploy/m2hod.yaml are installed as shipped,
// with stateDir as the unit's state directory and nss as the script's
// name service choice. It skips when the machine
// has no systemd to boot or no cgroup v2 hierarchy to give it.
func startSystemd(t *testing.T, b *bed, stateDir, nss string) *systemdContainer {
	t.Helper()
	if _, err := os.Stat(systemdBinary); err != nil {
		t.Skipf("no systemd to run the unit under: %v", err)
	}
	for _, tool := range []string{"nsenter", "ip"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is needed to run systemd in the test's namespaces: %v", tool, err)
		}
	}
	parent, err := ownCgroup()
	if err != nil {
		t.Skipf("no cgroup v2 hierarchy for a container's systemd: %v", err)
	}
	sd := &systemdContainer{t: t, cgroup: filepath.Join(parent, "m2ho-systemd-"+nstest.UniqueSuffix()),
		exited: make(chan struct{})}
	require.NoError(t, os.Mkdir(sd.cgroup, 0o755))
	t.Cleanup(sd.removeCgroup)
	cgroupDir, err := os.Open(sd.cgroup)
	require.NoError(t, err)
	defer cgroupDir.Close()

	script, err := filepath.Abs("testdata/systemd-container.sh")
	require.NoError(t, err)
	deploy, err := filepath.Abs("../../deploy")
	require.NoError(t, err)
	work := t.TempDir()
	sd.out = filepath.Join(work, "out")
	sd.cmd = b.ue.Command(context.Background(), "sh", script, work,
		filepath.Join(deploy, "m2hod.service"), filepath.Join(deploy, "m2hod.yaml"), m2hodBin, stateDir, nss)
	// The cgroup namespace is unshared by systemd's own start (see the
	// script): one created here would be rooted at this process's cgroup.
	sd.cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWPID | syscall.CLONE_NEWNS | syscall.CLONE_NEWUTS,
		UseCgroupFD: true,
		CgroupFD:    int(cgroupDir.Fd()),
	}
	output := &logbuf.Buffer{}
	sd.cmd.Stdout, sd.cmd.Stderr = output, output
	require.NoError(t, sd.cmd.Start())
	go func() {
		_ = sd.cmd.Wait()
		close(sd.exited)
	}()
	t.Cleanup(func() {
		if t.Failed() {
			unit, _ := sd.run("systemctl", "status", "--no-pager", "--full", "m2hod.service")
			t.Logf("container:\n%s\nsystemctl status:\n%s\nm2hod:\n%s", output, unit, sd.file("m2hod.log"))
		}
		// Killing PID 1 ends every process of its PID namespace.
		_ = sd.cmd.Process.Kill()
		<-sd.exited
	})

	deadline := time.Now().Add(30 * time.Second)
	for {
		state, _ := sd.run("systemctl", "is-system-running")
		if state == "running" || state == "degraded" {
			return sd
		}
		select {
		case <-sd.exited:
			t.Fatalf("the container exited while booting:\n%s", output)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("systemd not running after 30 s (%q):\n%s", state, output)
		}
	}
}

// ownCgroup is this process's cgroup in the cgroup v2 hierarchy, as a
// directory of the host's file system.
func ownCgroup() (string, error) {
	mounts, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	defer mounts.Close()
	mountPoint := ""
	sc := bufio.NewScanner(mounts)
	for sc.Scan() {
		// the file system type follows the " - " separator
		fields := strings.Fields(sc.Text())
		for i, f := range fields {
			if f == "-" && i+1 < len(fields) && fields[i+1] == "cgroup2" && len(fields) > 4 {
				mountPoint = fields[4]
			}
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	if mountPoint == "" {
		return "", errors.New("cgroup2 is not mounted")
	}
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	for line := range strings.SplitSeq(string(self), "\n") {
		if path, ok := strings.CutPrefix(line, "0::"); ok {
			return filepath.Join(mountPoint, path), nil
		}
	}
	return "", errors.New("no cgroup v2 entry in /proc/self/cgroup")
}

// removeCgroup removes the container's cgroup tree once its processes are
// gone.
func (sd *systemdContainer) removeCgroup() {
	deadline := time.Now().Add(5 * time.Second)
	for {
		events, err := os.ReadFile(filepath.Join(sd.cgroup, "cgroup.events"))
		if err != nil || strings.Contains(string(events), "populated 0") || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	var dirs []string
	_ = filepath.WalkDir(sd.cgroup, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, path)
		}
		return nil
	})
	// children first
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := os.Remove(dirs[i]); err != nil {
			sd.t.Errorf("removing the container's cgroup: %v", err)
		}
	}
}

// run runs a command inside the container and returns its trimmed output.
func (sd *systemdContainer) run(name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "nsenter", append([]string{"--target", strconv.Itoa(sd.cmd.Process.Pid),
		"--mount", "--pid", "--uts", "--net", "--cgroup", name}, args...)...).CombinedOutput()
	if err != nil {
		err = fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out)), err
}

// systemctl runs systemctl in the container, failing the test on an error.
func (sd *systemdContainer) systemctl(args ...string) string {
	sd.t.Helper()
	out, err := sd.run("systemctl", args...)
	require.NoError(sd.t, err)
	return out
}

// diagSocket is the path, from the test's mount namespace, of the
// default diag input of the unit, in its RuntimeDirectory.
func (sd *systemdContainer) diagSocket() string {
	return fmt.Sprintf("/proc/%d/root/run/m2ho/diag.sock", sd.cmd.Process.Pid)
}

// property is one property of m2hod.service, as systemctl shows it.
func (sd *systemdContainer) property(name string) string {
	sd.t.Helper()
	return sd.systemctl("show", "--property="+name, "--value", "m2hod.service")
}

// file reads one of the logs; empty when it does not exist.
func (sd *systemdContainer) file(name string) string {
	data, _ := os.ReadFile(filepath.Join(sd.out, name))
	return string(data)
}

// serviceLog is m2hod's output under the service manager.
type serviceLog struct{ sd *systemdContainer }

func (l serviceLog) String() string { return l.sd.file("m2hod.log") }

// mainProcess reads the status of m2hod.service's main process from the
// host's /proc.
func (sd *systemdContainer) mainProcess() map[string]string {
	sd.t.Helper()
	procs, err := os.ReadFile(filepath.Join(sd.cgroup, "system.slice", "m2hod.service", "cgroup.procs"))
	require.NoError(sd.t, err)
	pids := strings.Fields(string(procs))
	require.Len(sd.t, pids, 1, "the service runs one process")
	data, err := os.ReadFile(filepath.Join("/proc", pids[0], "status"))
	require.NoError(sd.t, err)
	fields := make(map[string]string)
	for line := range strings.SplitSeq(string(data), "\n") {
		if key, value, ok := strings.Cut(line, ":"); ok {
			fields[key] = strings.TrimSpace(value)
		}
	}
	return fields
}

// TestSystemdUnit runs deploy/m2hod.service, with deploy/m2hod.yaml as its
// configuration, under systemd: it starts with the unit's transient user
// and three capabilities, pins its flows, clamps a download at a handover,
// comes back after a crash with the connection's flow state, restarts in
// place at systemctl reload, and detaches and unpins when stopped. The
// example configuration's interface, diag input and listen address are
// the testbed's. It runs with and without nss-systemd, which resolves the
// names of transient users and which minimal images lack.
func TestSystemdUnit(t *testing.T) {
	for _, nss := range []string{"systemd", "files"} {
		t.Run("nss="+nss, func(t *testing.T) {
			b := newBed(t)
			sd := startSystemd(t, b, stateDirWithHistory(t), nss)
			sd.systemctl("start", "m2hod.service")
			d := &daemonProc{t: t, log: serviceLog{sd}, diagSocket: sd.diagSocket()}
			d.connect(b.ue)
			st := d.status()
			assert.Equal(t, "enforce", st.Mode)
			assert.Equal(t, "tcx", st.AttachMode)
			_, lookupErr := sd.run("getent", "passwd", "m2hod")
			assert.Equal(t, nss == "systemd", lookupErr == nil, "the service's user has a name only through nss-systemd")

			uid := assertServiceProcess(t, sd.mainProcess())
			pins, err := sd.run("find", "/sys/fs/bpf/m2ho", "-name", "flow_table", "-user", strconv.Itoa(uid))
			require.NoError(t, err)
			assert.NotEmpty(t, pins, "the flow table is pinned, owned by the service's user")

			dl := b.startDownload(t, pacing)
			dl.waitWindow(5*time.Second, "open", unclamped)
			d.waitStatus(2*time.Second, "the download tracked", func(s status) bool { return s.Datapath.Flows == 1 })

			// A crash: systemd restarts the daemon, which takes over the
			// flows. The pins change owner in between, as when the
			// transient user had another id in the crashed run.
			sd.systemctl("kill", "--signal=KILL", "m2hod.service")
			_, err = sd.run("chown", "-R", "12345:12345", "/sys/fs/bpf/m2ho")
			require.NoError(t, err)
			require.Equal(t, "0", sd.property("NRestarts"),
				"the pins changed owner before the restart (RestartSec=2s)")
			deadline := time.Now().Add(15 * time.Second)
			for sd.property("NRestarts") != "1" {
				require.True(t, time.Now().Before(deadline), "systemd did not restart m2hod after SIGKILL")
				time.Sleep(50 * time.Millisecond)
			}
			d.waitHealthy(15 * time.Second)
			d.waitLog(5*time.Second, "took over pinned flows")
			assert.Contains(t, d.log.String(), "flows=1")
			// Each start asked the kernel for the handshakes of open
			// connections, through the sockets the unit allows: none at
			// the first, the download's at the restart.
			adoptions := linesWith(d.log.String(), "adopted the handshakes of open connections")
			if assert.Len(t, adoptions, 2) {
				for _, want := range []string{"scan_err=<nil>", "store_err=<nil>", "malformed=0"} {
					assert.Contains(t, adoptions[0], want)
					assert.Contains(t, adoptions[1], want)
				}
				assert.Contains(t, adoptions[0], "stored=0")
				assert.Contains(t, adoptions[1], "sockets=1")
				assert.Contains(t, adoptions[1], "stored=1")
			}
			d.send(measReport(diag.EventA3, sub6A, sub6B))
			d.send(hoCommand(diag.HOPCell, sub6A, sub6B))
			dl.waitWindow(time.Second, "clamped", clampedTo(targetBuffer))
			assert.Zero(t, d.status().Datapath.Counters["no_wscale"], "the window scale survived the restart")

			// The modem resets: its interface goes and a new one takes
			// its name. The confined daemon follows it without a restart.
			b.resetModem(t)
			d.waitLog(5*time.Second, "the interface is gone")
			d.waitStatus(5*time.Second, "attached again", func(s status) bool { return s.AttachMode == "tcx" })
			assert.Len(t, linesWith(d.log.String(), "datapath attached again"), 1)
			assert.Equal(t, "1", sd.property("NRestarts"), "no restart for the interface")

			// systemctl reload: the same process restarts in place,
			// under the same confinement.
			pid := sd.property("MainPID")
			sd.systemctl("reload", "m2hod.service")
			d.waitLog(10*time.Second, "configuration reloaded")
			d.waitHealthy(15 * time.Second)
			assert.Equal(t, pid, sd.property("MainPID"), "reloaded in the same process")
			assert.Equal(t, "1", sd.property("NRestarts"), "no restart for a reload")
			assert.Equal(t, "tcx", d.status().AttachMode)
			assert.Len(t, linesWith(d.log.String(), "took over pinned flows"), 2,
				"after the crash and after the reload")

			sd.systemctl("stop", "m2hod.service")
			assert.Equal(t, "inactive", sd.property("ActiveState"))
			assert.Contains(t, d.log.String(), "stopping")
			assert.Zero(t, tcxPrograms(t, b), "nothing left on the interface")
			left, err := sd.run("find", "/sys/fs/bpf/m2ho", "-mindepth", "1")
			require.NoError(t, err)
			assert.Empty(t, left, "nothing left pinned")
			state, err := sd.run("ls", "/var/lib/private/m2ho")
			require.NoError(t, err)
			assert.Contains(t, state, "cells.db", "the cell history stays in the state directory")
		})
	}
}

// linesWith returns the lines of log that contain substr.
func linesWith(log, substr string) []string {
	var lines []string
	for line := range strings.Lines(log) {
		if strings.Contains(line, substr) {
			lines = append(lines, line)
		}
	}
	return lines
}

// assertServiceProcess checks the identity the unit gives the daemon and
// returns its user id.
func assertServiceProcess(t *testing.T, proc map[string]string) int {
	t.Helper()
	uids := strings.Fields(proc["Uid"])
	require.NotEmpty(t, uids)
	uid, err := strconv.Atoi(uids[0])
	require.NoError(t, err)
	assert.True(t, uid >= dynamicUIDMin && uid <= dynamicUIDMax, "uid %d is a transient user", uid)
	for _, set := range []string{"CapEff", "CapPrm", "CapBnd", "CapAmb"} {
		caps, err := strconv.ParseUint(proc[set], 16, 64)
		require.NoError(t, err, set)
		assert.Equal(t, fmt.Sprintf("%016x", uint64(serviceCapabilities)), fmt.Sprintf("%016x", caps), set)
	}
	assert.Equal(t, "1", proc["NoNewPrivs"])
	assert.Equal(t, "2", proc["Seccomp"], "a system call filter is in force")
	return uid
}

// TestSystemdUnitWaitsForTheModem starts the unit before the modem
// interface exists, as at a boot where the modem enumerates late: m2hod
// is ready (Type=notify) and waits for it, saying so in systemctl status,
// /status and its metrics, without a restart, and attaches once the
// interface is there.
func TestSystemdUnitWaitsForTheModem(t *testing.T) {
	b := newBed(t)
	b.removeModem(t)
	sd := startSystemd(t, b, t.TempDir(), "files")
	sd.systemctl("start", "m2hod.service")
	assert.Equal(t, "active", sd.property("ActiveState"), "ready while it waits")
	assert.Equal(t, "waiting for the interface wwan0", sd.property("StatusText"))
	d := &daemonProc{t: t, log: serviceLog{sd}}
	d.connect(b.ue)
	assert.Equal(t, "waiting_for_interface", d.status().State)
	assert.Equal(t, 1.0, d.metric("m2hod_waiting_for_interface"))
	assert.Equal(t, 0.0, d.metric("m2hod_datapath_attached"))
	// longer than the restarts of a daemon that exited would take
	time.Sleep(3 * time.Second)
	assert.Equal(t, "0", sd.property("NRestarts"))

	b.linkModem(t)
	// the endpoints close for a moment, between the wait and the daemon
	d.waitLog(10*time.Second, "m2hod ready")
	d.waitHealthy(5 * time.Second)
	assert.Equal(t, "tcx", d.status().AttachMode)
	assert.Equal(t, "active", sd.property("ActiveState"))
	assert.Equal(t, "0", sd.property("NRestarts"))
	assert.Equal(t, 0.0, d.metric("m2hod_waiting_for_interface"))
	assert.Equal(t, "m2ho on wwan0 (enforce, attached: tcx)", sd.property("StatusText"))
	assert.NotEmpty(t, sd.property("WatchdogTimestampMonotonic"), "the watchdog is pinged")
	assert.NotEqual(t, "0", sd.property("WatchdogTimestampMonotonic"), "the watchdog is pinged")
}

// TestSystemdWatchdogRestartsAStalledDaemon: a daemon that stops pinging
// (here stopped outright) is killed by systemd's watchdog and started
// again. A drop-in shortens WatchdogSec and the abort timeout, so that
// the test does not wait the unit's 10 s twice.
func TestSystemdWatchdogRestartsAStalledDaemon(t *testing.T) {
	b := newBed(t)
	sd := startSystemd(t, b, t.TempDir(), "files")
	_, err := sd.run("sh", "-c", "printf '[Service]\\nWatchdogSec=2s\\nTimeoutAbortSec=1s\\n' "+
		">/run/systemd/system/m2hod.service.d/watchdog.conf")
	require.NoError(t, err)
	sd.systemctl("daemon-reload")
	sd.systemctl("start", "m2hod.service")
	d := &daemonProc{t: t, log: serviceLog{sd}, diagSocket: sd.diagSocket()}
	d.connect(b.ue)
	pid := sd.property("MainPID")
	// pinged every second: the service stays up past its WatchdogSec
	time.Sleep(3 * time.Second)
	require.Equal(t, "0", sd.property("NRestarts"), "a healthy daemon keeps the watchdog quiet")

	_, err = sd.run("kill", "-STOP", pid)
	require.NoError(t, err)
	deadline := time.Now().Add(20 * time.Second)
	for sd.property("NRestarts") != "1" {
		require.True(t, time.Now().Before(deadline), "the watchdog did not restart the stalled daemon: %s",
			sd.property("ActiveState"))
		time.Sleep(100 * time.Millisecond)
	}
	d.waitHealthy(15 * time.Second)
	assert.NotEqual(t, pid, sd.property("MainPID"))
	assert.Equal(t, "active", sd.property("ActiveState"))
}
