// Command baseline is the start-up that idem's commands which open no
// ledger (--version, --help, key) are held to: a Go program that links
// cobra and modernc's SQLite driver, as idem does, and nothing of idem's.
// It prints its version, as `idem --version` does.
//
//	baseline --version
package main

import (
	"os"

	"github.com/spf13/cobra"
	_ "modernc.org/sqlite"
)

func main() {
	root := &cobra.Command{Use: "baseline", Version: "v0.0.0", SilenceUsage: true}
	root.SetArgs(os.Args[1:])
	if err := root.Execute(); err != nil {
		os.Exit(1)
	}
}
