//go:build race

package ledger_test

// raceDetector is true under -race, where SQLite (transpiled Go) runs tens
// of times slower: big fills shrink so the suite stays quick.
const raceDetector = true
