// Command idem makes a shell command safe to repeat: it runs the command once
// per key, records the result in a ledger and replays it for every repeat.
package main

import (
	"context"
	"os"

	"github.com/idemhq/idem/cmd"
)

func main() {
	os.Exit(cmd.Main(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}
