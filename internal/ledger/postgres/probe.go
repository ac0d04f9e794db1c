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
// answers an SSLRequest within milliseconds.
const probeTimeout = 2 * time.Second

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

// probe asks addr (host:port) what it is, after a connection failed in a
// way PostgreSQL's own failures do not explain (the connection closed or
// timed out before any answer): it sends an SSLRequest, which PostgreSQL
// and PgBouncer answer with one byte, S or N, followed by a blank line,
// which makes an HTTP server answer (PostgreSQL then drops the connection
// with "invalid length of startup packet" in its log). It returns nil for
// something that answered as PostgreSQL, a *mismatchError naming what
// answered instead, errSilent, or the dial's own error.
func probe(ctx context.Context, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	deadline, _ := ctx.Deadline()
	c.SetDeadline(deadline)
	// Length 8, code 80877103 (1234 5679), then CR LF CR LF.
	if _, err := c.Write([]byte{0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f, '\r', '\n', '\r', '\n'}); err != nil {
		return nil // it took the connection and closed it: nothing to name
	}
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	if n == 0 {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return errSilent
		}
		// Closed without a word: a TLS server drops an SSLRequest so.
		if probeTLS(ctx, addr) {
			return &mismatchError{addr: addr, what: "TLS (a TLS server or proxy: PostgreSQL starts TLS only after its own request)"}
		}
		return nil
	}
	return answered(addr, buf[:n])
}

// answered names what sent first, the first bytes of its answer to probe.
func answered(addr string, b []byte) error {
	switch {
	case len(b) == 1 && (b[0] == 'S' || b[0] == 'N'), b[0] == 'E':
		return nil // PostgreSQL or PgBouncer (E: one that refuses the request)
	case bytes.HasPrefix(b, []byte("HTTP/")):
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
