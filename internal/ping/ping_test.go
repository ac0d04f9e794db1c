package ping

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/monitor"
)

// recorder is a monitor on loopback that answers each request with the
// next of its statuses (then 200), and records what it got.
type recorder struct {
	mu       sync.Mutex
	statuses []int
	got      []string // "PATH?QUERY BODY"
	limit    string   // Ping-Body-Limit to announce
	hang     chan struct{}
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	b, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	r.got = append(r.got, req.URL.RequestURI()+" "+string(b))
	status := http.StatusOK
	if len(r.statuses) > 0 {
		status, r.statuses = r.statuses[0], r.statuses[1:]
	}
	hang := r.hang
	r.mu.Unlock()
	if hang != nil {
		select {
		case <-hang:
		case <-req.Context().Done():
		}
		return
	}
	if r.limit != "" {
		w.Header().Set("Ping-Body-Limit", r.limit)
	}
	w.WriteHeader(status)
}

func (r *recorder) requests() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.got...)
}

func serve(t *testing.T, r *recorder) *url.URL {
	t.Helper()
	srv := httptest.NewServer(r)
	t.Cleanup(func() {
		if r.hang != nil {
			close(r.hang)
		}
		srv.Close()
	})
	u, err := url.Parse(srv.URL + "/ping/s3cr3t")
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func TestSenderInOrderAndRetried(t *testing.T) {
	r := &recorder{statuses: []int{503, 200, 404}, limit: "12"}
	s := New(serve(t, r), "idem/test")
	s.Send(monitor.Ping{Kind: monitor.Start, RunID: "r1"})
	s.Send(monitor.Ping{Kind: monitor.Exit, Code: 3, RunID: "r1", Body: []byte("0123456789abcdefghij\n")})
	s.Send(monitor.Ping{Kind: monitor.Log, RunID: "r2", Body: []byte("x")})
	res := s.Close(context.Background())
	want := []string{
		"/ping/s3cr3t/start?rid=r1 ", // 503: tried again
		"/ping/s3cr3t/start?rid=r1 ",
		"/ping/s3cr3t/3?rid=r1 9abcdefghij\n", // 404: not again; the end of the body, within Ping-Body-Limit
		"/ping/s3cr3t/log?rid=r2 x",
	}
	if got := r.requests(); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("requests %q, want %q", got, want)
	}
	if res.Sent != 3 || res.Failed != 1 || res.Err == nil || !strings.Contains(res.Err.Error(), "404") {
		t.Errorf("result %+v, want 1 of 3 failed with the 404", res)
	}
}

// TestSenderGivesUp: a monitor that never answers holds Close only until
// its context is done; what failed says why without the URL.
func TestSenderGivesUp(t *testing.T) {
	r := &recorder{hang: make(chan struct{})}
	s := New(serve(t, r), "idem/test")
	s.Send(monitor.Ping{Kind: monitor.Start, RunID: "r1"})
	s.Send(monitor.Ping{Kind: monitor.Exit, RunID: "r1"})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	done := make(chan monitor.Result)
	go func() { done <- s.Close(ctx) }()
	var res monitor.Result
	select {
	case res = <-done:
	case <-time.After(monitor.ExitWait):
		t.Fatal("Close did not give up when its context was done")
	}
	if res.Sent != 2 || res.Failed != 2 || res.Err == nil || strings.Contains(res.Err.Error(), "s3cr3t") {
		t.Errorf("result %+v (%v), want 2 of 2 failed, the URL not shown", res, res.Err)
	}
}

// TestSenderRefusedHidesURL: the error of a refused connection names the
// address, never the URL's path.
func TestSenderRefusedHidesURL(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	u, _ := url.Parse(srv.URL + "/ping/s3cr3t")
	srv.Close()
	s := New(u, "idem/test")
	s.Send(monitor.Ping{Kind: monitor.Start, RunID: "r1"})
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	res := s.Close(ctx)
	if res.Failed != 1 || res.Err == nil || strings.Contains(res.Err.Error(), "s3cr3t") || !strings.Contains(res.Err.Error(), "refused") {
		t.Errorf("result %+v (%v)", res, res.Err)
	}
}
