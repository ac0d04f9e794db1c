package cmd

import (
	"context"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemhq/idem/internal/ledger"
)

// completionLimit bounds the keys offered for one completion.
const completionLimit = 200

// completeKeys is the ValidArgsFunction of inspect and purge: the ledger's
// keys that start with what was typed. Any error gives no completions and
// prints nothing (a shell prompt is no place for idem: lines), and a
// ledger that does not exist yet is not created.
func completeKeys(a *app, maxArgs int) cobra.CompletionFunc {
	return func(c *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		none := cobra.ShellCompDirectiveNoFileComp
		if maxArgs > 0 && len(args) >= maxArgs {
			return nil, none
		}
		keys, err := ledgerKeys(c.Context(), a, toComplete)
		if err != nil {
			return nil, none
		}
		done := make(map[string]bool, len(args))
		for _, k := range args {
			done[k] = true
		}
		out := keys[:0]
		for _, k := range keys {
			if !done[k] {
				out = append(out, k)
			}
		}
		return out, none
	}
}

func ledgerKeys(ctx context.Context, a *app, prefix string) ([]string, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	a.ui = &ui{w: io.Discard, quiet: true}    // warnings of openLedger go nowhere
	l, err := a.openExistingLedger(ctx, true) // never create a ledger to complete a word
	if err != nil {
		return nil, err
	}
	defer l.Close()
	recs, err := l.List(ctx, ledger.ListFilter{Prefix: prefix, Limit: completionLimit})
	if err != nil {
		return nil, err
	}
	keys := make([]string, len(recs))
	for i, r := range recs {
		keys[i] = r.Key
	}
	return keys, nil
}

// initCompletionCmd adds cobra's completion command now (rather than when
// it executes) so that a missing or unknown shell is a usage error, not a
// help text that exits 0.
func initCompletionCmd(a *app, root *cobra.Command) {
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		if c.Name() != "completion" {
			continue
		}
		// cobra's own help, not the root's (which adds the whole exit
		// table), before its section: cobra made the command under the
		// root, where it inherits the root's.
		c.SetHelpFunc((&cobra.Command{}).HelpFunc())
		helpSection(a, c, writerExits("the completion script"))
		c.Example = `  # bash (needs the bash-completion package), for this shell, then for good
  source <(idem completion bash)
  idem completion bash > /etc/bash_completion.d/idem

  # zsh, fish
  idem completion zsh > "${fpath[1]}/_idem"
  idem completion fish > ~/.config/fish/completions/idem.fish`
		c.Args = cobra.ArbitraryArgs
		c.RunE = func(c *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usagef("idem completion bash|zsh|fish|powershell", "name a shell")
			}
			return usagef("idem completion bash|zsh|fish|powershell", "unknown shell %q", args[0])
		}
	}
}

// completeFlagValues makes the flags that take one of a few words complete
// those words instead of file names. The full tree is built only for help,
// completion and the like, so a run pays nothing for it.
func completeFlagValues(root *cobra.Command) {
	words := map[string][]string{
		"stdin":  {"pass", "spool"},
		"stdout": {"live", "final"},
		"stderr": {"live", "final"},
		"status": {"in_progress", "succeeded", "failed", "retryable"},
		"period": {"hour", "day", "week", "month"},
	}
	_ = root.RegisterFlagCompletionFunc("color", wordsCompletion([]string{"auto", "always", "never"}, false))
	for _, c := range root.Commands() {
		for name, w := range words {
			if c.Flags().Lookup(name) != nil {
				// --status takes a comma-separated list: complete its last item.
				_ = c.RegisterFlagCompletionFunc(name, wordsCompletion(w, name == "status"))
			}
		}
	}
}

// wordsCompletion offers the words that start with what was typed (after
// its last comma when list is set) and no file names.
func wordsCompletion(words []string, list bool) cobra.CompletionFunc {
	return func(_ *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		done, last := "", toComplete
		if i := strings.LastIndexByte(toComplete, ','); list && i >= 0 {
			done, last = toComplete[:i+1], toComplete[i+1:]
		}
		var out []string
		for _, w := range words {
			if strings.HasPrefix(w, last) {
				out = append(out, done+w)
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}
