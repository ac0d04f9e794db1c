package cmd

// emptyPartHint is the hint for a --key with an empty part: it names the
// variable an unset one of which most likely left it, the commit's under
// the CI idem runs in.
func emptyPartHint(env []string) string {
	v := "$EVENT_ID"
	switch {
	case ciIs(env, "GITHUB_ACTIONS"):
		v = "$GITHUB_SHA"
	case ciIs(env, "GITLAB_CI"):
		v = "$CI_COMMIT_SHA"
	}
	return "is a variable such as " + v + " unset? every run with it unset would share this key; idem key PART... refuses empty parts"
}

// ciIs reports whether the CI variable name is "true", as GitHub Actions
// and GitLab CI set theirs.
func ciIs(env []string, name string) bool {
	v, _ := lookupEnv(env, name)
	return v == "true"
}
