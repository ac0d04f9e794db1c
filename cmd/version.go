package cmd

import (
	"runtime/debug"
	"strings"
)

// versionString is the link-time version, else the module version from the
// build info, with the VCS revision when the build recorded one.
func versionString() string {
	v := version
	info, ok := debug.ReadBuildInfo()
	if v == "" && ok {
		v = info.Main.Version
	}
	if v == "" {
		v = "(devel)"
	}
	if ok {
		for _, s := range info.Settings {
			// A pseudo-version (v0.0.0-<date>-<rev12>) names it already.
			if s.Key == "vcs.revision" && len(s.Value) >= 12 && !strings.Contains(v, s.Value[:12]) {
				v += " (" + s.Value[:12] + ")"
			}
		}
	}
	return v
}
