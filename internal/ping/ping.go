// Package ping delivers monitor pings (internal/monitor) over HTTP, in
// order and off the run's path: one goroutine sends them, each within
// monitor.Budget, a try within monitor.TryTimeout, a failed try again
// after a growing pause while the budget lasts. A proxy comes from the
// variables curl reads (HTTPS_PROXY, HTTP_PROXY, NO_PROXY, and their
// lower-case forms). It links net/http and crypto/tls, so only idem-net
// links it: idem hands a run with a ping URL over to idem-net.
package ping

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/idemhq/idem/internal/monitor"
)

// queueLen bounds the pings waiting: a run whose monitor does not
// answer keeps at most this many, and drops what comes after.
const queueLen = 64

// firstPause is the pause after a failed try; it doubles each time.
const firstPause = 500 * time.Millisecond

// Sender is a monitor.Sender over HTTP.
type Sender struct {
	target    *url.URL
	userAgent string
	client    *http.Client
	queue     chan monitor.Ping
	done      chan struct{} // closed when the goroutine has sent the last
	ctx       context.Context
	cancel    context.CancelFunc // gives up on every ping not yet delivered

	mu     sync.Mutex
	sent   int
	failed int
	err    error
	limit  int // body limit: monitor.BodyLimit, or a server's lower Ping-Body-Limit
}

// New returns a Sender of pings to target: a monitor.Dialer.
func New(target *url.URL, userAgent string) monitor.Sender {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = http.ProxyFromEnvironment
	t.TLSHandshakeTimeout = monitor.TryTimeout
	t.ResponseHeaderTimeout = monitor.TryTimeout
	ctx, cancel := context.WithCancel(context.Background())
	s := &Sender{target: target, userAgent: userAgent, client: &http.Client{Transport: t, Timeout: monitor.TryTimeout},
		queue: make(chan monitor.Ping, queueLen), done: make(chan struct{}), ctx: ctx, cancel: cancel, limit: monitor.BodyLimit}
	go s.loop()
	return s
}

// Send queues p; a full queue drops it, counted as not delivered.
func (s *Sender) Send(p monitor.Ping) {
	s.mu.Lock()
	s.sent++
	s.mu.Unlock()
	select {
	case s.queue <- p:
	default:
		s.fail(errors.New("too many pings waiting for a monitor that does not answer"))
	}
}

// Close waits for the queued pings until ctx is done, then gives up on
// what is left.
func (s *Sender) Close(ctx context.Context) monitor.Result {
	close(s.queue)
	select {
	case <-s.done:
	case <-ctx.Done():
		s.cancel()
		<-s.done
	}
	s.cancel()
	s.mu.Lock()
	defer s.mu.Unlock()
	return monitor.Result{Sent: s.sent, Failed: s.failed, Err: s.err}
}

// fail counts a ping not delivered; the first failure's reason is kept,
// which says more than the give-ups that follow it.
func (s *Sender) fail(err error) {
	s.mu.Lock()
	s.failed++
	if s.err == nil {
		s.err = err
	}
	s.mu.Unlock()
}

// loop sends the queued pings in order; once the Sender gave up, it
// counts the rest as failed.
func (s *Sender) loop() {
	defer close(s.done)
	for p := range s.queue {
		if err := s.ctx.Err(); err != nil {
			s.fail(errors.New("given up at idem's exit"))
			continue
		}
		if err := s.deliver(p); err != nil {
			s.fail(err)
		}
	}
}

// deliver sends p, trying again within monitor.Budget after a failure
// worth another try (no answer, 500, 502, 503, 504, 408, 429).
func (s *Sender) deliver(p monitor.Ping) error {
	ctx, cancel := context.WithTimeout(s.ctx, monitor.Budget)
	defer cancel()
	pause := firstPause
	for {
		again, err := s.try(ctx, p)
		if err == nil || !again {
			return err
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			if s.ctx.Err() != nil {
				return fmt.Errorf("%w; given up at idem's exit", err)
			}
			return fmt.Errorf("%w; given up after %s", err, monitor.Budget)
		case <-t.C:
		}
		pause *= 2
	}
}

// try sends p once. again: a failure another try may mend.
func (s *Sender) try(ctx context.Context, p monitor.Ping) (again bool, err error) {
	s.mu.Lock()
	body := p.Body
	if len(body) > s.limit {
		body = body[len(body)-s.limit:] // the end, and idem's line, matter most
	}
	s.mu.Unlock()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.URL(s.target), bytes.NewReader(body))
	if err != nil {
		return false, errors.New("the request could not be made")
	}
	req.Header.Set("User-Agent", s.userAgent)
	req.Header.Set("Content-Type", "text/plain; charset=utf-8")
	resp, err := s.client.Do(req)
	if err != nil {
		// A *url.Error names the URL, a secret: keep only its cause.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return true, err
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	resp.Body.Close()
	if n, err := strconv.Atoi(resp.Header.Get("Ping-Body-Limit")); err == nil && n >= 0 {
		s.mu.Lock()
		s.limit = min(s.limit, n)
		s.mu.Unlock()
	}
	switch c := resp.StatusCode; {
	case c >= 200 && c < 300:
		return false, nil
	case c == http.StatusInternalServerError, c == http.StatusBadGateway, c == http.StatusServiceUnavailable,
		c == http.StatusGatewayTimeout, c == http.StatusRequestTimeout, c == http.StatusTooManyRequests:
		return true, fmt.Errorf("the monitor answered %s", resp.Status)
	default:
		return false, fmt.Errorf("the monitor answered %s", resp.Status)
	}
}
