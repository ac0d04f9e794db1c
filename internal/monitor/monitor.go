// Package monitor is what idem tells a cron monitor of its runs, in
// healthchecks.io's ping protocol, which other monitors copy: a start
// when an attempt of the command starts, its exit status when the key's
// outcome is recorded, a log entry for an attempt that leaves the key to
// be tried again, each with a run id (?rid=) that pairs an attempt's
// start with its end. It builds the requests from a URL template and
// knows nothing of the network: an executable that links an HTTP client
// gives a Dialer (internal/ping, linked by idem-net only).
package monitor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Bounds of the delivery, the same for every Sender: a ping never holds
// the command back (Send does not block), and idem's exit waits for the
// pings still under way for at most ExitWait.
const (
	// BodyLimit is the most a ping's body carries: the end of the output
	// and idem's line. healthchecks.io keeps the first 100 kB; a
	// server's smaller Ping-Body-Limit wins.
	BodyLimit = 10_000
	// TryTimeout bounds one HTTP request.
	TryTimeout = 5 * time.Second
	// Budget bounds one ping: its tries and the pauses between them.
	Budget = 10 * time.Second
	// ExitWait bounds how long idem's exit waits for its pings after the
	// outcome is recorded; what is not delivered by then is given up.
	ExitWait = 10 * time.Second
)

// Kind is what a ping reports.
type Kind int

// The kinds of ping.
const (
	// Start: an attempt of the command has started.
	Start Kind = iota + 1
	// Exit: the key's outcome is recorded; Code is its exit status (0
	// success, anything else a failure).
	Exit
	// Log: an entry for the monitor's log that changes nothing (an
	// attempt that leaves the key to be tried again).
	Log
)

// Ping is one request to the monitor.
type Ping struct {
	Kind  Kind
	Code  int    // Exit's status, 0-255
	RunID string // the attempt's run id (RunID)
	Body  []byte
}

// URL is p's request URL under target: target's path with /start,
// /CODE or /log appended, and rid= added to its query.
func (p Ping) URL(target *url.URL) string {
	u := *target
	var suffix string
	switch p.Kind {
	case Start:
		suffix = "start"
	case Exit:
		suffix = strconv.Itoa(p.Code)
	default:
		suffix = "log"
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + "/" + suffix
	if u.RawPath != "" {
		u.RawPath = strings.TrimSuffix(u.RawPath, "/") + "/" + suffix
	}
	if p.RunID != "" {
		q := u.Query()
		q.Set("rid", p.RunID)
		u.RawQuery = q.Encode()
	}
	u.Fragment, u.RawFragment = "", ""
	return u.String()
}

// Sender delivers pings in the order sent, off the caller's path.
type Sender interface {
	// Send queues p and returns at once.
	Send(p Ping)
	// Close waits until every ping sent was delivered or given up, or
	// until ctx is done, when it gives up on the rest.
	Close(ctx context.Context) Result
}

// Result is what a Sender delivered.
type Result struct {
	Sent   int // pings sent
	Failed int // of them, not delivered
	// Err is why the first one that failed did, never with the URL in
	// it (it is a secret).
	Err error
}

// Dialer returns a Sender of pings to target, identifying itself as
// userAgent.
type Dialer func(target *url.URL, userAgent string) Sender

// RunID is the run id of attempt n of key under the fencing token token
// in the ledger whose identity is ledgerID: a UUID (version 8, from
// SHA-256), the same for the attempt's start and end, and different for
// every attempt ever run in that ledger, since tokens are never handed
// out twice.
func RunID(ledgerID, key string, token int64, n int) string {
	h := sha256.New()
	for _, s := range []string{"idem run id", ledgerID, key, strconv.FormatInt(token, 10), strconv.Itoa(n)} {
		h.Write([]byte(strconv.Itoa(len(s))))
		h.Write([]byte{':'})
		h.Write([]byte(s))
	}
	var b [16]byte
	copy(b[:], h.Sum(nil))
	b[6] = b[6]&0x0f | 0x80 // version 8: custom
	b[8] = b[8]&0x3f | 0x80 // the RFC 9562 variant
	x := hex.EncodeToString(b[:])
	return x[:8] + "-" + x[8:12] + "-" + x[12:16] + "-" + x[16:20] + "-" + x[20:]
}

// Body is a ping's body: the end of stdout, then the end of stderr, then
// line (idem's), within limit bytes: line whole, each stream's end as
// much as fits, half the room each when both are long. A stream cut
// short begins with a line saying so; each ends with a newline.
func Body(stdout, stderr []byte, line string, limit int) []byte {
	line = strings.TrimRight(line, "\n") + "\n"
	if len(line) > limit {
		line = line[len(line)-max(limit, 0):]
	}
	room := limit - len(line)
	out, errs := size(stdout), size(stderr)
	if out+errs > room {
		half := room / 2
		switch {
		case out <= half:
			errs = room - out
		case errs <= half:
			out = room - errs
		default:
			out, errs = half, room-half
		}
	}
	b := make([]byte, 0, min(limit, size(stdout)+size(stderr)+len(line)))
	b = appendEnd(b, stdout, out)
	b = appendEnd(b, stderr, errs)
	return append(b, line...)
}

// size is what s takes in a body, whole: s and a newline it lacks.
func size(s []byte) int {
	if len(s) == 0 || s[len(s)-1] == '\n' {
		return len(s)
	}
	return len(s) + 1
}

// cutMark begins a stream whose start was cut off.
const cutMark = "[...]\n"

// appendEnd appends the end of s to b in at most n bytes: s whole when
// it fits, else cutMark and as much of its end as fits; with a newline
// after it when s does not end with one.
func appendEnd(b, s []byte, n int) []byte {
	if len(s) == 0 || n <= 0 {
		return b
	}
	if size(s) > n {
		keep := n - len(cutMark) - 1 // room for the mark and a newline
		if keep <= 0 {
			return b
		}
		b = append(b, cutMark...)
		s = s[len(s)-keep:]
	}
	b = append(b, s...)
	if s[len(s)-1] != '\n' {
		b = append(b, '\n')
	}
	return b
}

// Redact shows a ping URL without its secret: the scheme and host only
// (https://hc-ping.com/…). Anyone with a check's URL can ping it, so its
// path, query and user info are never printed.
func Redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return "(a URL idem cannot read)"
	}
	return u.Scheme + "://" + u.Host + "/…"
}

// ErrTemplate is wrapped by every error of ParseTemplate.
var ErrTemplate = errors.New("invalid ping URL")

// Template is a ping URL in which {key} stands for the key of the run
// and {group} for its group (Group), so that one setting serves every
// job of a crontab.
type Template struct {
	raw string
}

// ParseTemplate checks raw, a ping URL that may hold {key} and {group} in
// its path and query: an http or https URL with a host. Errors wrap
// ErrTemplate and never hold raw, which is a secret.
func ParseTemplate(raw string) (Template, error) {
	if raw == "" {
		return Template{}, fmt.Errorf("%w: empty", ErrTemplate)
	}
	if strings.ContainsAny(raw, " \t\r\n\x00") {
		return Template{}, fmt.Errorf("%w: it holds white space or a control character", ErrTemplate)
	}
	if _, rest, _ := strings.Cut(raw, "://"); strings.ContainsRune(authority(rest), '{') {
		return Template{}, fmt.Errorf("%w: {key} and {group} belong in its path or query, not its host", ErrTemplate)
	}
	sample, err := expand(raw, "k", "g")
	if err != nil {
		return Template{}, err
	}
	u, err := url.Parse(sample)
	switch {
	case err != nil:
		return Template{}, fmt.Errorf("%w: it does not parse as a URL", ErrTemplate)
	case u.Scheme != "http" && u.Scheme != "https":
		return Template{}, fmt.Errorf("%w: it must begin with https:// or http://", ErrTemplate)
	case u.Host == "" || u.Opaque != "":
		return Template{}, fmt.Errorf("%w: it names no host", ErrTemplate)
	}
	return Template{raw: raw}, nil
}

// authority is the part of a URL after "scheme://" up to its path, query
// or fragment.
func authority(rest string) string {
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		return rest[:i]
	}
	return rest
}

// Redacted is the template shown without its secret (Redact).
func (t Template) Redacted() string { return Redact(t.raw) }

// Expand returns the ping URL for key, a valid key (whose characters a
// URL's path and query take as they are).
func (t Template) Expand(key string) (*url.URL, error) {
	s, err := expand(t.raw, key, Group(key))
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("%w: with the key in it, it does not parse as a URL", ErrTemplate)
	}
	return u, nil
}

// expand replaces {key} and {group} in raw; any other brace is an error.
func expand(raw, key, group string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(raw); {
		c := raw[i]
		switch c {
		case '{':
			end := strings.IndexByte(raw[i:], '}')
			if end < 0 {
				return "", fmt.Errorf("%w: a '{' is not closed: write {key} or {group}", ErrTemplate)
			}
			switch name := raw[i+1 : i+end]; name {
			case "key":
				b.WriteString(key)
			case "group":
				b.WriteString(group)
			default:
				return "", fmt.Errorf("%w: it holds braces around neither key nor group: write {key} or {group}", ErrTemplate)
			}
			i += end + 1
		case '}':
			return "", fmt.Errorf("%w: a '}' without its '{'", ErrTemplate)
		default:
			b.WriteByte(c)
			i++
		}
	}
	return b.String(), nil
}

// Group is the group of key, for a monitor's check per job rather than
// per run: the key without its last ':'-separated part (the date, the
// period, the event id; and without the '::' and hash that idem key
// appends), lower-cased, with every character but a-z, 0-9, '-' and '_'
// made '-', as healthchecks.io's slugs are. A key of one part is its own
// group. "backup:2026-12-03" is in "backup", "db:vacuum:2026-W49" in
// "db-vacuum".
func Group(key string) string {
	k := key
	if i := strings.LastIndex(k, "::"); i > 0 && hashSuffix(k[i+2:]) {
		k = k[:i]
	}
	if i := strings.LastIndexByte(k, ':'); i > 0 {
		k = k[:i]
	}
	b := []byte(strings.ToLower(k))
	for i, c := range b {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' && c != '_' {
			b[i] = '-'
		}
	}
	return string(b)
}

// hashSuffix reports whether s is the 16 lower-case hex digits that idem
// key appends after '::'.
func hashSuffix(s string) bool {
	if len(s) != 16 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
