package postgres

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"
	"unicode"
)

// probeTimeout bounds each of probe's connections: what answers at all
// answers an SSLRequest within milliseconds, and an HTTP server the blank
// line that follows within as many.
const probeTimeout = 3 * time.Second

// probeNudge is how long probe waits for an answer to its SSLRequest
// before it sends the blank line that completes an HTTP request. Only a
// PostgreSQL slower than that to answer sees the blank line (and logs it
// as an invalid start-up packet); it still answers S or N first.
const probeNudge = time.Second

// mismatchError is a listener that answered, but not as PostgreSQL (or
// PgBouncer) does: waiting does not change what listens on a port, so a
// connection fails at once.
type mismatchError struct {
	addr, what string
}

func (e *mismatchError) Error() string {
	return fmt.Sprintf("the server at %s answered %s, not PostgreSQL", e.addr, e.what)
}

// errSilent is probe's finding for a port that accepts connections and
// says nothing.
var errSilent = errors.New("the port accepts connections but nothing answers on it")

// sslRequest is PostgreSQL's SSLRequest: length 8, code 80877103 (1234
// 5679). PostgreSQL and PgBouncer answer it with one byte, S or N, and
// log nothing when the client then hangs up.
var sslRequest = []byte{0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f}

// probe asks addr (host:port) what it is, on a connection of its own: it
// sends an SSLRequest, and when nothing answers within probeNudge, a
// blank line, which completes a request line for an HTTP server that
// waits for one (PostgreSQL would have answered by then). Protocols whose
// servers speak first (SSH) answer at once, a TLS server drops the
// SSLRequest. It returns nil for something that answered as PostgreSQL,
// a *mismatchError naming what answered instead, errSilent, or the
// dial's own error. Cancelling ctx ends it.
func probe(ctx context.Context, addr string) error {
	// The connection's own deadlines time the probe; ctx only cancels it,
	// so that its end is never taken for silence.
	deadline := time.Now().Add(probeTimeout)
	dctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(dctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	c.SetWriteDeadline(deadline)
	if _, err := c.Write(sslRequest); err != nil {
		return nil // it took the connection and closed it: nothing to name
	}
	buf := make([]byte, 64)
	c.SetReadDeadline(earliest(deadline, time.Now().Add(probeNudge)))
	n, err := c.Read(buf)
	if n == 0 && errors.Is(err, os.ErrDeadlineExceeded) && time.Now().Before(deadline) {
		c.SetReadDeadline(deadline)
		if _, err := c.Write([]byte("\r\n\r\n")); err != nil {
			return nil
		}
		n, err = c.Read(buf)
	}
	switch {
	case n > 0:
		return answered(addr, buf[:n])
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, os.ErrDeadlineExceeded):
		return errSilent
	}
	// Closed without a word: a TLS server drops an SSLRequest so.
	if probeTLS(dctx, addr) {
		return &mismatchError{addr: addr, what: "TLS (a TLS server or proxy: PostgreSQL starts TLS only after its own request)"}
	}
	return nil
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// answered names what sent first, the first bytes of its answer to probe.
func answered(addr string, b []byte) error {
	lower := bytes.ToLower(b)
	switch {
	case len(b) == 1 && (b[0] == 'S' || b[0] == 'N'), b[0] == 'E':
		return nil // PostgreSQL or PgBouncer (E: one that refuses the request)
	case bytes.HasPrefix(b, []byte("HTTP/")):
		return &mismatchError{addr: addr, what: "HTTP"}
	case bytes.HasPrefix(lower, []byte("<!doctype html")), bytes.HasPrefix(lower, []byte("<html")):
		// A page without a status line: the answer to a request line
		// without a version (HTTP/0.9), as Python's http.server gives it.
		return &mismatchError{addr: addr, what: "HTTP"}
	case bytes.HasPrefix(b, []byte("SSH-")):
		return &mismatchError{addr: addr, what: "SSH"}
	case b[0] == 0x15 || b[0] == 0x16:
		return &mismatchError{addr: addr, what: "TLS (a TLS server or proxy: PostgreSQL starts TLS only after its own request)"}
	}
	return &mismatchError{addr: addr, what: fmt.Sprintf("%q", printable(b))}
}

// probeTLS reports whether addr completes a TLS handshake at once (its
// certificate unchecked: it is only asked what it is).
func probeTLS(ctx context.Context, addr string) bool {
	host, _, _ := net.SplitHostPort(addr)
	d := tls.Dialer{Config: &tls.Config{InsecureSkipVerify: true, ServerName: host}} //nolint:gosec // a probe, nothing is sent
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// printable is the start of b with what is not printable ASCII dropped,
// for a message.
func printable(b []byte) string {
	s := strings.Map(func(r rune) rune {
		if r < unicode.MaxASCII && unicode.IsPrint(r) {
			return r
		}
		return -1
	}, string(b))
	if len(s) > 24 {
		s = s[:24]
	}
	return s
}
