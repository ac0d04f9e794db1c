// Package e2e holds idem's end-to-end tests; it has no code of its own.
// They run idem as a separate process, as users do: the test binary
// registers idem and the helper programs the tests start (testscript.Main),
// so nothing needs building first.
//
//   - main_test.go: TestMain and TestScripts, which runs the txtar scripts
//     in the repository's testscripts directory;
//   - programs_test.go: every helper program (echoargs, flaky, crashjob, ...);
//   - scriptcmds_test.go: every custom script command (exitcode, waitfile,
//     need, jsonfield, pgledger, ...);
//   - proc_test.go: the one process runner of the Go-level tests (command,
//     start, run, and exitStatus, which the exitcode command decodes with too);
//   - need_test.go: what the tests need from outside (strace, git, go, curl,
//     PostgreSQL, pseudo-terminals): missing, a test skips, or fails when
//     IDEM_TEST_STRICT=1;
//   - build_test.go: the module's root, and tagged builds of idem;
//   - the tests: leases and signals, crash points, injected I/O faults, bad
//     ledgers and hostile input, the PostgreSQL fleet, the documentation
//     (the tested blocks, links and FAQ messages of the README and docs/),
//     install from a clean clone, the benchmark's phase points.
//
// go test -short skips the slow ones: crash points, fault injection, the
// install from a clean clone and the phases build.
package e2e
