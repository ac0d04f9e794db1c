// Package probe names the points a run of idem passes: the ledger opened,
// the key reserved, the child started and exited, the outcome recorded.
//
// In idem as built for use, At and Exit do nothing and cost nothing. Two
// test builds give the points a meaning:
//
//   - -tags testhooks (internal/e2e/crash_test.go): IDEM_TESTONLY_CRASH=POINT[@N]
//     makes idem SIGKILL itself the Nth time it reaches POINT, so the
//     reliability suite can check the ledger after a crash at every step of
//     a run.
//   - -tags phases (bench/run.sh): At notes the time of each point and Exit
//     writes them to the file IDEM_PHASE_FILE names, for the benchmark's
//     breakdown of where a run's time goes.
//
// The two builds keep what they note in package variables; a build for use
// has none.
package probe
