package cmd

import (
	"os"

	"github.com/idemhq/idem/internal/runner"
)

// hostLookup reads where and as whom the command runs now, before
// anything is locked: a stat of a directory on a hung file system, or a
// user looked up in a directory service, then holds up this run alone.
// It returns the lookup of the host's identity, which only the kernel
// answers, for the first reservation that records it (a replay never
// does). A build with the testhooks tag lets tests replace the identity
// (host_testhooks.go).
func (a *app) hostLookup() func() runner.Host {
	cwd, _ := os.Getwd()
	user := runner.UserName()
	return func() runner.Host {
		h := testOnlyHostOverride(runner.Identity(), a.getenv)
		h.Cwd, h.User = cwd, user
		return h
	}
}
