package monitor

import (
	"errors"
	"net/url"
	"regexp"
	"strings"
	"testing"
)

const secret = "https://hc-ping.com/0b2c5f7e-1d3a-4c9b-8e6f-2a7d9c1b4e53"

func TestTemplate(t *testing.T) {
	for _, tc := range []struct {
		raw, key, want string
	}{
		{secret, "backup:2026-12-03", secret},
		{"https://hc-ping.com/PINGKEY/{group}?create=1", "backup:2026-12-03", "https://hc-ping.com/PINGKEY/backup?create=1"},
		{"https://hc-ping.com/PINGKEY/{group}", "DB.Main:vacuum:2026-W49", "https://hc-ping.com/PINGKEY/db-main-vacuum"},
		{"http://127.0.0.1:8000/ping/{key}/", "evt:42", "http://127.0.0.1:8000/ping/evt:42/"},
		{"https://user:pw@hc.example/{group}/{key}", "nightly-report", "https://user:pw@hc.example/nightly-report/nightly-report"},
		{"https://push.example/api/push/TOKEN?status=up&msg={key}", "backup:2026-12-03", "https://push.example/api/push/TOKEN?status=up&msg=backup:2026-12-03"},
	} {
		tpl, err := ParseTemplate(tc.raw)
		if err != nil {
			t.Errorf("ParseTemplate(%q): %v", tc.raw, err)
			continue
		}
		u, err := tpl.Expand(tc.key)
		if err != nil || u.String() != tc.want {
			t.Errorf("Expand(%q) of %q = %v, %v; want %s", tc.key, tc.raw, u, err, tc.want)
		}
	}
}

func TestTemplateErrors(t *testing.T) {
	for _, tc := range []struct{ raw, why string }{
		{"", "empty"},
		{"hc-ping.com/0b2c5f7e", "https://"},
		{"ftp://hc-ping.com/0b2c5f7e", "https://"},
		{"https:///0b2c5f7e", "no host"},
		{"https:0b2c5f7e", "no host"},
		{"https://hc-ping.com/0b2c5f7e {key}", "white space"},
		{"https://hc-ping.com/PINGKEY/{slug}", "write {key} or {group}"},
		{"https://hc-ping.com/PINGKEY/{group", "not closed"},
		{"https://hc-ping.com/PINGKEY/group}", "without its '{'"},
		{"https://{group}.hc-ping.com/PINGKEY", "not its host"},
		{"https://hc-ping.com:{key}/PINGKEY", "not its host"},
		{"https://hc-ping.com/%zz", "does not parse"},
	} {
		_, err := ParseTemplate(tc.raw)
		if err == nil || !errors.Is(err, ErrTemplate) || !strings.Contains(err.Error(), tc.why) {
			t.Errorf("ParseTemplate(%q): %v, want an ErrTemplate saying %q", tc.raw, err, tc.why)
			continue
		}
		if tc.raw != "" && strings.Contains(err.Error(), tc.raw) {
			t.Errorf("ParseTemplate(%q)'s error shows the URL: %v", tc.raw, err)
		}
	}
}

func TestRedact(t *testing.T) {
	for raw, want := range map[string]string{
		secret: "https://hc-ping.com/…",
		"https://user:pw@hc.example:8443/ping/x?k=v#f": "https://hc.example:8443/…",
		"hc-ping.com/uuid":      "(a URL idem cannot read)",
		"https://hc.example/%z": "(a URL idem cannot read)",
	} {
		if got := Redact(raw); got != want {
			t.Errorf("Redact(%q)=%q, want %q", raw, got, want)
		}
	}
}

func TestGroup(t *testing.T) {
	for key, want := range map[string]string{
		"backup:2026-12-03":                         "backup",
		"backup:2026-12-03T14b":                     "backup",
		"db:vacuum:2026-W49":                        "db-vacuum",
		"nightly-report":                            "nightly-report",
		"Deploy.Prod:abc123":                        "deploy-prod",
		"webhook:evt_2026_12__42::47729443def5c046": "webhook",
		"evt:a::0123456789abcdef":                   "evt",
		"x::notahash":                               "x-",
	} {
		if got := Group(key); got != want {
			t.Errorf("Group(%q)=%q, want %q", key, got, want)
		}
	}
}

func TestPingURL(t *testing.T) {
	target, _ := url.Parse("https://hc-ping.com/PINGKEY/backup?create=1")
	rid := RunID("ledger", "backup:2026-12-03", 7, 1)
	for _, tc := range []struct {
		p    Ping
		want string
	}{
		{Ping{Kind: Start, RunID: rid}, "https://hc-ping.com/PINGKEY/backup/start?create=1&rid=" + rid},
		{Ping{Kind: Exit, Code: 0, RunID: rid}, "https://hc-ping.com/PINGKEY/backup/0?create=1&rid=" + rid},
		{Ping{Kind: Exit, Code: 75, RunID: rid}, "https://hc-ping.com/PINGKEY/backup/75?create=1&rid=" + rid},
		{Ping{Kind: Log, RunID: rid}, "https://hc-ping.com/PINGKEY/backup/log?create=1&rid=" + rid},
	} {
		if got := tc.p.URL(target); got != tc.want {
			t.Errorf("URL of %+v = %s, want %s", tc.p, got, tc.want)
		}
	}
	slash, _ := url.Parse("http://127.0.0.1:1/ping/uuid/")
	if got, want := (Ping{Kind: Start}).URL(slash), "http://127.0.0.1:1/ping/uuid/start"; got != want {
		t.Errorf("URL under a trailing slash: %s, want %s", got, want)
	}
}

func TestRunID(t *testing.T) {
	uuid := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-8[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	seen := map[string]string{}
	for _, c := range []struct {
		ledger, key string
		token       int64
		n           int
	}{
		{"l1", "backup:2026-12-03", 1, 1}, {"l1", "backup:2026-12-03", 1, 2}, {"l1", "backup:2026-12-03", 2, 2},
		{"l2", "backup:2026-12-03", 1, 1}, {"l1", "backup:2026-12-04", 1, 1}, {"l1", "backup:2026-12-0", 31, 1},
	} {
		id := RunID(c.ledger, c.key, c.token, c.n)
		if !uuid.MatchString(id) {
			t.Errorf("RunID%v=%q: not a version 8 UUID", c, id)
		}
		if other, ok := seen[id]; ok {
			t.Errorf("RunID%v=%s, as for %s", c, id, other)
		}
		seen[id] = id
		if again := RunID(c.ledger, c.key, c.token, c.n); again != id {
			t.Errorf("RunID%v is %s, then %s", c, id, again)
		}
	}
}

func TestBody(t *testing.T) {
	long := func(c string, n int) []byte { return []byte(strings.Repeat(c, n)) }
	for _, tc := range []struct {
		name           string
		stdout, stderr []byte
		line           string
		limit          int
		want           string
	}{
		{"both whole", []byte("out\n"), []byte("err"), "idem: k: succeeded", 100, "out\nerr\nidem: k: succeeded\n"},
		{"no output", nil, nil, "idem: line\n", 100, "idem: line\n"},
		{"stdout long", long("o", 50), []byte("e\n"), "L", 30, "[...]\n" + strings.Repeat("o", 19) + "\ne\nL\n"},
		{"both long", long("o", 50), long("e", 50), "L", 30, "[...]\n" + strings.Repeat("o", 7) + "\n[...]\n" + strings.Repeat("e", 7) + "\nL\n"},
		{"line longer than the limit", []byte("out"), nil, "0123456789", 5, "6789\n"},
	} {
		got := Body(tc.stdout, tc.stderr, tc.line, tc.limit)
		if string(got) != tc.want {
			t.Errorf("%s: Body=%q, want %q", tc.name, got, tc.want)
		}
		if len(got) > tc.limit {
			t.Errorf("%s: %d bytes, over the limit of %d", tc.name, len(got), tc.limit)
		}
	}
}
