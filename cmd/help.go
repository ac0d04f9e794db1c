package cmd

import (
	"strings"

	"github.com/spf13/cobra"
)

// manOrder is the order of the manual page's command sections: the one
// most readers come for first, then the ledger's upkeep.
func manOrder() []string {
	return []string{"run", "inspect", "purge", "key", "metrics", "backup", "schema"}
}

// detailsHelp is a help's DETAILS section: text that explains how a command
// works underneath, shown after Usage and Examples, indented as they are.
func detailsHelp(text string) string {
	if text == "" {
		return ""
	}
	var b strings.Builder
	b.WriteString("\nDETAILS\n")
	for _, l := range strings.Split(text, "\n") {
		if l != "" {
			b.WriteString("  ")
		}
		b.WriteString(l + "\n")
	}
	return b.String()
}

// commandDetails is the DETAILS text of the command c, "" for most.
func commandDetails(c *cobra.Command) string {
	if c.Name() == "run" {
		return runDetails()
	}
	return ""
}
