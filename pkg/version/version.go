// Package version identifies the running build: the release it was cut
// from, the commit and the Go toolchain.
package version

import (
	"runtime"
	"runtime/debug"
)

// Set at link time by the Makefile (-X), from git describe and git
// rev-parse. A plain `go build` or `go install` leaves them empty, and
// Get falls back on what the Go toolchain embedded.
var (
	version  string
	revision string
)

// Info is what identifies a build.
type Info struct {
	// Version is a release tag, or git describe's form between releases
	// (v0.3.0-12-gabcdef0, with -dirty for uncommitted changes).
	Version string
	// Revision is the full commit hash, "unknown" without VCS data.
	Revision string
	// GoVersion is the toolchain the binary was built with.
	GoVersion string
}

// Get returns the build's identity.
func Get() Info {
	info := Info{Version: version, Revision: revision, GoVersion: runtime.Version()}
	if build, ok := debug.ReadBuildInfo(); ok {
		if info.Version == "" && build.Main.Version != "" {
			info.Version = build.Main.Version
		}
		if info.Revision == "" {
			info.Revision = setting(build, "vcs.revision")
			if info.Revision != "" && setting(build, "vcs.modified") == "true" {
				info.Revision += "-dirty"
			}
		}
	}
	if info.Version == "" {
		info.Version = "(devel)"
	}
	if info.Revision == "" {
		info.Revision = "unknown"
	}
	return info
}

func setting(build *debug.BuildInfo, key string) string {
	for _, s := range build.Settings {
		if s.Key == key {
			return s.Value
		}
	}
	return ""
}

// String is the one line `m2hod --version` prints.
func (i Info) String() string {
	return i.Version + " (revision " + i.Revision + ", " + i.GoVersion + ")"
}
