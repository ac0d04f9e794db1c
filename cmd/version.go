package cmd

import (
	"runtime/debug"
	"strings"
)

// versionString is the link-time version, else the module version from the
// build info, with the VCS revision when the build recorded one, else the
// link-time commit.
func versionString() string {
	v := version
	info, ok := debug.ReadBuildInfo()
	if v == "" && ok {
		v = info.Main.Version
	}
	if v == "" {
		v = "(devel)"
	}
	rev := commit
	if ok {
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" {
				rev = s.Value
			}
		}
	}
	// A pseudo-version (v0.0.0-<date>-<rev12>) names it already.
	if len(rev) >= 12 && !strings.Contains(v, rev[:12]) {
		v += " (" + rev[:12] + ")"
	}
	return v
}
