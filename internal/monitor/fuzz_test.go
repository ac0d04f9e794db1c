package monitor

import (
	"net/url"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzTemplate: a ping URL comes from the environment or a flag. Whatever
// it is, ParseTemplate does not panic and its error never shows the URL;
// a template it takes expands, for any valid key, to an http(s) URL on
// the template's own host (a key never moves the pings elsewhere), whose
// every ping URL parses with the run id in its query.
func FuzzTemplate(f *testing.F) {
	f.Add(secret, "backup:2026-12-03")
	f.Add("https://hc-ping.com/PINGKEY/{group}?create=1", "db:vacuum:2026-W49")
	f.Add("http://127.0.0.1:8000/{key}/{group}/", "evt:42::0123456789abcdef")
	f.Add("https://{key}.example/x", "a.b.c:d")
	f.Add("https://h/{keyy}", "k")
	f.Add("https://h/}{", "k")
	f.Add("https://u:p@h:1/%41{key}#frag", "nightly-report")
	f.Add("https://h/?a={group}&b={key}", "Deploy.Prod:abc")
	f.Fuzz(func(t *testing.T, raw, key string) {
		tpl, err := ParseTemplate(raw)
		if err != nil {
			if len(raw) >= 24 && strings.Contains(err.Error(), raw) {
				t.Fatalf("ParseTemplate(%q): the error shows the URL: %v", raw, err)
			}
			return
		}
		if !validKey(key) {
			return
		}
		u, err := tpl.Expand(key)
		if err != nil {
			t.Fatalf("ParseTemplate(%q) took it, and Expand(%q): %v", raw, key, err)
		}
		plain, err := tpl.Expand("plainkey")
		if err != nil {
			t.Fatalf("Expand(plainkey) of %q: %v", raw, err)
		}
		if u.Host != plain.Host || (u.Scheme != "http" && u.Scheme != "https") {
			t.Fatalf("template %q: key %q gives %s://%s, plainkey %s://%s", raw, key, u.Scheme, u.Host, plain.Scheme, plain.Host)
		}
		for _, p := range []Ping{{Kind: Start, RunID: "r"}, {Kind: Exit, Code: 1, RunID: "r"}, {Kind: Log, RunID: "r"}} {
			pu, err := url.Parse(p.URL(u))
			if err != nil || pu.Query().Get("rid") != "r" || pu.Host != u.Host {
				t.Fatalf("ping URL %q of %q: %v", p.URL(u), u, err)
			}
		}
		if g := Group(key); !utf8.ValidString(g) || strings.ContainsAny(g, ":./") {
			t.Fatalf("Group(%q)=%q", key, g)
		}
	})
}

// validKey is the key rule (internal/key): what Expand is given.
func validKey(k string) bool {
	if len(k) < 1 || len(k) > 128 {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte(":_-.", c) >= 0) {
			return false
		}
	}
	return true
}
