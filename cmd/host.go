package cmd

import "github.com/idemhq/idem/internal/runner"

// localHost is this machine's identity as a ledger owner; a build with the
// testhooks tag lets tests replace it (host_testhooks.go).
func (a *app) localHost() runner.Host {
	return testOnlyHostOverride(runner.LocalHost(), a.getenv)
}
