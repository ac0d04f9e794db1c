package cmd

import (
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// manOrder is the order of the manual page's command sections: the one
// most readers come for first, then the ledger's upkeep.
func manOrder() []string {
	return []string{"run", "inspect", "purge", "key", "metrics", "backup", "check", "schema"}
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

// flagSuggestion is the flag of c (its own or inherited) that name is most
// likely a typo of: within two edits, or the start of its name; "" if none.
func flagSuggestion(c *cobra.Command, name string) string {
	best, bestDist := "", 3
	c.Flags().VisitAll(func(f *pflag.Flag) { // cobra has merged the inherited flags
		d := editDistance(name, f.Name)
		if strings.HasPrefix(f.Name, name) && len(name) >= 3 {
			d = min(d, 1)
		}
		if d < bestDist {
			best, bestDist = f.Name, d
		}
	})
	return best
}

// commandSuggestion is the subcommand of c that word is most likely a
// typo of (cobra's suggestions come in name order, not by closeness); ""
// if none is within c.SuggestionsMinimumDistance edits or starts with it.
func commandSuggestion(c *cobra.Command, word string) string {
	best, bestDist := "", c.SuggestionsMinimumDistance+1
	for _, s := range c.SuggestionsFor(word) {
		if d := editDistance(word, s); d < bestDist {
			best, bestDist = s, d
		}
		if best == "" {
			best = s // a prefix match, farther than the bound
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
