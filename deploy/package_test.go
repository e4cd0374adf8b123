package deploy_test

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// requireTools skips the test when a command it runs is missing.
func requireTools(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
}

func run(t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s %s:\n%s", name, strings.Join(args, " "), out)
	return string(out)
}

// TestDebianPackage builds the amd64 package as `make dist` does and
// installs it with dpkg into a scratch root: the static binary runs, the
// unit is there, disabled, and verifies, the configuration is a conffile
// that an upgrade keeps and a purge removes.
func TestDebianPackage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds m2hod and a package")
	}
	requireTools(t, "make", "dpkg", "dpkg-query", "git")
	dist := t.TempDir()
	run(t, "..", "make", "--no-print-directory", "dist-amd64", "DIST="+dist)
	debs, err := filepath.Glob(filepath.Join(dist, "m2hod_*_amd64.deb"))
	require.NoError(t, err)
	require.Len(t, debs, 1)

	// A static binary has no program interpreter (dynamic loader).
	bin, err := elf.Open(filepath.Join(dist, "m2hod-linux-amd64"))
	require.NoError(t, err)
	for _, p := range bin.Progs {
		assert.NotEqual(t, elf.PT_INTERP, p.Type, "statically linked")
	}
	bin.Close()

	root := t.TempDir()
	admin := filepath.Join(root, "var/lib/dpkg")
	require.NoError(t, os.MkdirAll(filepath.Join(admin, "info"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(admin, "updates"), 0o755))
	for _, f := range []string{"status", "available"} {
		require.NoError(t, os.WriteFile(filepath.Join(admin, f), nil, 0o644))
	}
	dpkg := func(args ...string) string {
		return run(t, "", "dpkg", append([]string{"--root=" + root, "--force-script-chrootless", "--force-not-root"}, args...)...)
	}
	dpkg("-i", debs[0])
	query := func(format string) string {
		return run(t, "", "dpkg-query", "--admindir="+admin, "-W", "-f="+format, "m2hod")
	}
	assert.Equal(t, "install ok installed", query("${Status}"))
	assert.Contains(t, query("${Conffiles}"), "/etc/m2ho/m2hod.yaml", "the configuration is a conffile")

	out, err := exec.Command(filepath.Join(root, "usr/bin/m2hod"), "--version").Output()
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(string(out), "m2hod "), "%s", out)
	assert.Contains(t, string(out), "(revision ")

	unitPath := filepath.Join(root, "usr/lib/systemd/system/m2hod.service")
	unit := unitDirectives(t, unitPath)
	assert.Equal(t, []string{"/usr/bin/m2hod --config /etc/m2ho/m2hod.yaml"}, unit["Service.ExecStart"])
	assert.Equal(t, []string{"notify"}, unit["Service.Type"])
	for _, f := range []string{"usr/share/m2ho/grafana-dashboard.json", "usr/share/m2ho/m2hod-alerts.yml", "usr/share/m2ho/m2hod.yaml.example"} {
		assert.FileExists(t, filepath.Join(root, f))
	}
	if _, err := exec.LookPath("systemctl"); err == nil {
		// is-enabled exits 1 for a disabled unit
		out, _ := exec.Command("systemctl", "--root="+root, "is-enabled", "m2hod.service").Output()
		assert.Equal(t, "disabled", strings.TrimSpace(string(out)), "installed disabled")
	}
	if analyze, err := exec.LookPath("systemd-analyze"); err == nil {
		// verify wants ExecStart to exist on this host: the installed
		// binary, through its path in the scratch root
		data, err := os.ReadFile(unitPath)
		require.NoError(t, err)
		verified := filepath.Join(t.TempDir(), "m2hod.service")
		require.NoError(t, os.WriteFile(verified,
			[]byte(strings.ReplaceAll(string(data), "/usr/bin/m2hod", filepath.Join(root, "usr/bin/m2hod"))), 0o644))
		out, err := exec.Command(analyze, "verify", verified).CombinedOutput()
		require.NoError(t, err, "systemd-analyze verify: %s", out)
		assert.Empty(t, strings.TrimSpace(string(out)))
	}

	// The operator's configuration survives a reinstall and a removal;
	// a purge takes it.
	conf := filepath.Join(root, "etc/m2ho/m2hod.yaml")
	edited := "iface: rmnet_data0\n"
	require.NoError(t, os.WriteFile(conf, []byte(edited), 0o644))
	dpkg("-i", debs[0])
	data, err := os.ReadFile(conf)
	require.NoError(t, err)
	assert.Equal(t, edited, string(data), "kept over a reinstall")
	dpkg("-r", "m2hod")
	assert.NoFileExists(t, filepath.Join(root, "usr/bin/m2hod"))
	assert.FileExists(t, conf, "kept over a removal")
	dpkg("--purge", "m2hod")
	assert.NoFileExists(t, conf, "removed by a purge")
}

// TestMakeInstall installs into a DESTDIR with the default PREFIX and
// uninstalls again: the unit points at the installed binary, an existing
// configuration is left alone, and uninstall leaves only it.
func TestMakeInstall(t *testing.T) {
	requireTools(t, "make", "git")
	destdir := t.TempDir()
	bin := filepath.Join(t.TempDir(), "m2hod")
	require.NoError(t, os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755))
	install := func(target string) string {
		return run(t, "..", "make", "--no-print-directory", target, "DESTDIR="+destdir, "M2HOD_BIN="+bin)
	}
	install("install")
	for _, f := range []string{"usr/local/bin/m2hod", "etc/systemd/system/m2hod.service", "etc/m2ho/m2hod.yaml",
		"usr/local/share/m2ho/grafana-dashboard.json", "usr/local/share/m2ho/m2hod-alerts.yml", "usr/local/share/m2ho/m2hod.yaml.example"} {
		assert.FileExists(t, filepath.Join(destdir, f))
	}
	unit := unitDirectives(t, filepath.Join(destdir, "etc/systemd/system/m2hod.service"))
	assert.Equal(t, []string{"/usr/local/bin/m2hod --config /etc/m2ho/m2hod.yaml"}, unit["Service.ExecStart"])

	conf := filepath.Join(destdir, "etc/m2ho/m2hod.yaml")
	require.NoError(t, os.WriteFile(conf, []byte("iface: usb0\n"), 0o644))
	assert.Contains(t, install("install"), "kept "+conf)
	data, err := os.ReadFile(conf)
	require.NoError(t, err)
	assert.Equal(t, "iface: usb0\n", string(data))

	install("uninstall")
	var left []string
	require.NoError(t, filepath.Walk(destdir, func(path string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			left = append(left, strings.TrimPrefix(path, destdir+"/"))
		}
		return err
	}))
	assert.Equal(t, []string{"etc/m2ho/m2hod.yaml"}, left, "only the operator's configuration stays")

	// PREFIX=/usr puts the unit where distributions keep theirs
	run(t, "..", "make", "--no-print-directory", "install", "DESTDIR="+destdir, "M2HOD_BIN="+bin, "PREFIX=/usr")
	unit = unitDirectives(t, filepath.Join(destdir, "usr/lib/systemd/system/m2hod.service"))
	assert.Equal(t, []string{"/usr/bin/m2hod --config /etc/m2ho/m2hod.yaml"}, unit["Service.ExecStart"])
}
