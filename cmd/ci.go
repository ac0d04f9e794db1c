package cmd

import (
	crand "crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/idemhq/idem/internal/ledger"
	"github.com/idemhq/idem/internal/runner"
)

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

// reportCI tells the CI idem runs in what a finished run did, so that a
// replay is not mistaken for a run. Under GitHub Actions a replay is a
// ::notice:: annotation on stderr (the runner reads workflow commands
// from both streams; stderr keeps it out of a captured or recorded
// stdout), and every run appends the step outputs replayed, exit_code
// and key to $GITHUB_OUTPUT, and a replay a line to $GITHUB_STEP_SUMMARY.
// Under GitLab CI, which has neither, a replay's notice is printed even
// with --quiet. Outside CI it costs a scan of the environment.
func reportCI(a *app, u *ui, res *runner.Result, code int) {
	switch {
	case ciIs(a.environ, "GITHUB_ACTIONS"):
		reportGitHub(a, u, res, code)
	case res.Replayed && u.quiet && ciIs(a.environ, "GITLAB_CI"):
		rec := res.Record
		u.startLine()
		fmt.Fprintf(u.w, "idem: replayed %s: %s %s, exit %d; the command did not run\n",
			rec.Key, rec.Status, rec.Finished.UTC().Format(time.RFC3339), rec.ExitCode)
	}
}

func reportGitHub(a *app, u *ui, res *runner.Result, code int) {
	if res.Replayed {
		rec := res.Record
		u.startLine()
		fmt.Fprintf(u.w, "::notice title=idem replayed %s::%s\n", ghEscape(rec.Key, true), ghEscape(replayLine(rec), false))
		if p, _ := lookupEnv(a.environ, "GITHUB_STEP_SUMMARY"); p != "" {
			appendCIFile(u, p, "idem: **replayed** `"+rec.Key+"`: "+replayLine(rec)+"\n")
		}
	}
	if p, _ := lookupEnv(a.environ, "GITHUB_OUTPUT"); p != "" {
		var b strings.Builder
		for _, kv := range [][2]string{{"replayed", strconv.FormatBool(res.Replayed)}, {"exit_code", strconv.Itoa(code)}, {"key", res.Key}} {
			writeGitHubOutput(&b, kv[0], kv[1])
		}
		appendCIFile(u, p, b.String())
	}
}

// replayLine says what a replay answered with, and that nothing ran.
func replayLine(rec *ledger.Record) string {
	return fmt.Sprintf("%s %s, exit %d; the command did not run (a new key, or idem purge %s, runs it again)",
		rec.Status, rec.Finished.UTC().Format(time.RFC3339), rec.ExitCode, rec.Key)
}

// writeGitHubOutput writes name=value in the runner's multiline-safe form,
// name<<DELIMITER, the value, DELIMITER, with a random delimiter no value
// can hold (the form GitHub's own toolkit writes).
func writeGitHubOutput(b *strings.Builder, name, value string) {
	var r [8]byte
	crand.Read(r[:])
	d := "ghadelimiter_" + hex.EncodeToString(r[:])
	b.WriteString(name + "<<" + d + "\n" + value + "\n" + d + "\n")
}

// appendCIFile appends text to one of the runner's files in one write; a
// failure is a warning: the run itself is done and recorded.
func appendCIFile(u *ui, path, text string) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err == nil {
		_, err = f.WriteString(text)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		u.warnf("write %s for the CI: %v", path, err)
	}
}

// ghEscape escapes a workflow command's message or, with property, a
// property value, as the runner unescapes them.
func ghEscape(s string, property bool) string {
	r := strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A")
	if property {
		r = strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A", ":", "%3A", ",", "%2C")
	}
	return r.Replace(s)
}
