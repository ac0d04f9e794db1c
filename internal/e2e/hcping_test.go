package e2e

// A stand-in for healthchecks.io's ping API on loopback, as its server
// answers (hc/api/views.py): what idem's pings are tested against, by the
// Go tests (newHCServer) and the scripts (the hcping program).

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// hcPing is one ping the stand-in accepted.
type hcPing struct {
	Check  string // the UUID, or PING_KEY/SLUG
	Action string // start, log, fail, success, or an exit status (0-255)
	RID    string // the run id ("" when none)
	Body   string // as kept: at most the server's body limit
	Size   int    // the body's size as sent
}

func (p hcPing) String() string {
	return fmt.Sprintf("%s %s rid=%s %q", p.Check, p.Action, p.RID, p.Body)
}

// hcServer is healthchecks.io's ping API on loopback: /ping/UUID or
// /ping/PING_KEY/SLUG, then optionally /start, /fail, /log or /STATUS
// (0-255; more is 400), by GET or POST; rid= in the query must be a UUID
// (else 400); the body is kept up to limit bytes, which every answer
// announces in Ping-Body-Limit. Instead of answering it can fail every
// request with status, or never answer (hang).
type hcServer struct {
	URL string // http://127.0.0.1:PORT/ping
	// Log, when set, gets one line per ping accepted (the hcping program).
	Log string

	mu       sync.Mutex
	pings    []hcPing
	requests int
	limit    int
	status   int
	hang     bool
	stop     chan struct{}
	srv      *http.Server
}

// uuidRE is what healthchecks.io takes as a run id.
var uuidRE = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// newHCServer starts the stand-in for the test's length.
func newHCServer(t testing.TB) *hcServer {
	t.Helper()
	s, err := startHCServer()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.close)
	return s
}

func startHCServer() (*hcServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &hcServer{URL: "http://" + ln.Addr().String() + "/ping", limit: 100_000, stop: make(chan struct{})}
	s.srv = &http.Server{Handler: http.HandlerFunc(s.serve)}
	go s.srv.Serve(ln)
	return s, nil
}

func (s *hcServer) close() {
	close(s.stop)
	s.srv.Close()
}

// set changes how the stand-in answers from now on.
func (s *hcServer) set(limit, status int, hang bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.limit, s.status, s.hang = limit, status, hang
}

// of returns the pings accepted for check, in the order they came.
func (s *hcServer) of(check string) []hcPing {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []hcPing
	for _, p := range s.pings {
		if p.Check == check {
			out = append(out, p)
		}
	}
	return out
}

// all returns every ping accepted, and the number of requests received.
func (s *hcServer) all() ([]hcPing, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]hcPing(nil), s.pings...), s.requests
}

func (s *hcServer) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 10<<20))
	s.mu.Lock()
	s.requests++
	limit, status, hang := s.limit, s.status, s.hang
	s.mu.Unlock()
	if hang {
		select {
		case <-s.stop:
		case <-r.Context().Done():
		}
		return
	}
	if status != 0 {
		http.Error(w, "failing on purpose", status)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodPost && r.Method != http.MethodHead {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	rest, ok := strings.CutPrefix(r.URL.Path, "/ping/")
	if !ok || rest == "" {
		http.NotFound(w, r)
		return
	}
	segs := strings.Split(strings.TrimSuffix(rest, "/"), "/")
	action, last := "success", segs[len(segs)-1]
	if n, err := strconv.Atoi(last); err == nil && len(segs) > 1 {
		if n < 0 || n > 255 {
			http.Error(w, "invalid url format", http.StatusBadRequest)
			return
		}
		action, segs = last, segs[:len(segs)-1]
	} else if (last == "start" || last == "fail" || last == "log") && len(segs) > 1 {
		action, segs = last, segs[:len(segs)-1]
	}
	if len(segs) > 2 {
		http.NotFound(w, r)
		return
	}
	rid := r.URL.Query().Get("rid")
	if _, has := r.URL.Query()["rid"]; has && !uuidRE.MatchString(rid) {
		http.Error(w, "invalid uuid format", http.StatusBadRequest)
		return
	}
	p := hcPing{Check: strings.Join(segs, "/"), Action: action, RID: rid, Size: len(body)}
	if len(body) > limit {
		body = body[:limit]
	}
	p.Body = string(body)
	s.mu.Lock()
	s.pings = append(s.pings, p)
	if s.Log != "" {
		if f, err := os.OpenFile(s.Log, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
			fmt.Fprintf(f, "%s %s %s %s\n", p.Check, p.Action, orDash(p.RID), strings.ReplaceAll(strings.TrimRight(p.Body, "\n"), "\n", " | "))
			f.Close()
		}
	}
	s.mu.Unlock()
	w.Header().Set("Ping-Body-Limit", strconv.Itoa(limit))
	fmt.Fprint(w, "OK")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// hcping URLFILE LOG: the stand-in as a program, for scripts. It writes
// its base URL (http://127.0.0.1:PORT/ping) to URLFILE once it listens,
// appends "CHECK ACTION RID BODY" to LOG for every ping (the body on one
// line, newlines as " | "; RID - when none), and exits after 2 minutes.
func hcping() {
	s, err := startHCServer()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	s.Log = os.Args[2]
	tmp := os.Args[1] + ".tmp"
	os.WriteFile(tmp, []byte(s.URL), 0o644)
	os.Rename(tmp, os.Args[1])
	time.Sleep(2 * time.Minute)
	os.Exit(0)
}
