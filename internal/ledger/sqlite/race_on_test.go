//go:build race

package sqlite_test

// raceDetector is true under -race, where SQLite (transpiled Go) runs tens
// of times slower: big fills shrink so the suite stays quick.
const raceDetector = true
