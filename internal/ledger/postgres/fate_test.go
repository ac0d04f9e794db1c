package postgres_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/ledger"
	"github.com/idemhq/idem/internal/ledger/ledgertest"
	"github.com/idemhq/idem/internal/ledger/postgres"
)

// When the connection breaks while Finish's statement is out, its fate is
// unknown, and Finish must believe only a fresh read of the record. A proxy
// between the ledger and the server breaks the connection at the two places
// that matter: after the server committed the outcome (its reply withheld),
// and before the statement reached the server.
func TestPostgresFinishFateUnknown(t *testing.T) {
	for _, tc := range []struct {
		name      string
		committed bool
	}{
		{"committed, reply lost", true},
		{"never reached the server", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, proxy := openThroughCutProxy(t)

			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			const key = "fate:finish-unknown"
			res, err := l.Reserve(ctx, ledger.ReserveRequest{Key: key, Fingerprint: "fp-fate", Command: []string{"true"},
				MaxAttempts: 1, Owner: ledger.Owner{Host: "h", PID: 1}, Lease: time.Minute})
			if err != nil || res.Outcome != ledger.Reserved {
				t.Fatalf("Reserve: %+v, %v", res, err)
			}

			// Finish's statement: the one that sets synchronous_commit from $16.
			proxy.arm("set_config('synchronous_commit', $16", tc.committed)
			err = l.Finish(ctx, ledger.FinishRequest{Key: key, Token: res.Token, AttemptID: res.AttemptID,
				Status: ledger.StatusSucceeded, ExitSource: "child", Class: "success", Duration: time.Second,
				OutputStored: true, Stdout: []byte("out")})
			if n := proxy.cutCount(); n != 1 {
				t.Fatalf("the proxy broke %d connections, want 1: the test did not put Finish's fate in doubt", n)
			}

			rec, gerr := l.Get(ctx, key)
			if gerr != nil {
				t.Fatalf("Get after the break: %v", gerr)
			}
			if tc.committed {
				if err != nil {
					t.Fatalf("Finish = %v, want nil: the outcome committed before the connection broke", err)
				}
				if rec.Status != ledger.StatusSucceeded || rec.Token != res.Token {
					t.Fatalf("record %s (token %d), want succeeded (token %d)", rec.Status, rec.Token, res.Token)
				}
				return
			}
			var se *ledger.StoreError
			if !errors.As(err, &se) {
				t.Fatalf("Finish = %v (%T), want a *StoreError: the outcome never reached the server", err, err)
			}
			if rec.Status != ledger.StatusInProgress {
				t.Fatalf("record %s, want still in progress", rec.Status)
			}
		})
	}
}

// When the connection breaks while the claim of a new key is out, a
// fresh read settles it: a claim that committed is this owner's
// reservation, which the run goes on with (its outcome lands), rather than
// a key left in progress and unowned for a lease; one that never reached
// the server is an error whose hint says the key may stay busy.
func TestPostgresReserveFateUnknown(t *testing.T) {
	for _, tc := range []struct {
		name      string
		committed bool
	}{
		{"committed, reply lost", true},
		{"never reached the server", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, proxy := openThroughCutProxy(t)

			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			const key = "fate:reserve-unknown"
			// The claim of a new key: the statement that sets synchronous_commit from $14.
			proxy.arm("set_config('synchronous_commit', $14", tc.committed)
			res, err := l.Reserve(ctx, ledger.ReserveRequest{Key: key, Fingerprint: "fp-fate", Command: []string{"true"},
				MaxAttempts: 1, Owner: ledger.Owner{Host: "h", BootID: "b", PID: 7, StartTime: 99}, Lease: time.Minute})
			if n := proxy.cutCount(); n != 1 {
				t.Fatalf("the proxy broke %d connections, want 1: the test did not put Reserve's fate in doubt", n)
			}
			if !tc.committed {
				var se *ledger.StoreError
				if !errors.As(err, &se) || !strings.Contains(se.Hint, "other hosts find the key busy until its lease (--lease) ends") {
					t.Fatalf("Reserve = %+v, %v: want a *StoreError whose hint says the key may stay busy", res, err)
				}
				return
			}
			if err != nil || res.Outcome != ledger.Reserved || res.Attempt != 1 {
				t.Fatalf("Reserve = %+v, %v: want the reservation that committed", res, err)
			}
			rec, err := l.Get(ctx, key)
			if err != nil || rec.Token != res.Token {
				t.Fatalf("record %+v, %v: want token %d", rec, err, res.Token)
			}
			if err := l.Finish(ctx, ledger.FinishRequest{Key: key, Token: res.Token, AttemptID: res.AttemptID,
				Status: ledger.StatusSucceeded, ExitSource: "child", Class: "success", Duration: time.Second,
				OutputStored: true}); err != nil {
				t.Fatalf("Finish with the settled reservation: %v", err)
			}
		})
	}
}

// cutProxy forwards TCP connections to a PostgreSQL server. Armed, it
// breaks the connection whose client next sends a message containing the
// marker: either at once, dropping the message, or after the server has
// answered it with ReadyForQuery (so its implicit transaction committed),
// withholding the answer from Bind on.
type cutProxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	marker  []byte
	deliver bool
	cuts    int
}

func startCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				p.serve(c)
			}()
		}
	}()
	return p
}

func (p *cutProxy) addr() string { return p.ln.Addr().String() }

func (p *cutProxy) arm(marker string, deliver bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.marker, p.deliver = []byte(marker), deliver
}

func (p *cutProxy) cutCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cuts
}

// take reports whether data carries the armed marker, disarming it, and
// whether that message is to be delivered.
func (p *cutProxy) take(data []byte) (hit, deliver bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.marker == nil || !bytes.Contains(data, p.marker) {
		return false, false
	}
	p.marker = nil
	return true, p.deliver
}

func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cuts++
}

func (p *cutProxy) serve(client net.Conn) {
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		client.Close()
		return
	}
	var once sync.Once
	closeBoth := func() {
		once.Do(func() {
			client.Close()
			server.Close()
		})
	}
	defer closeBoth()
	doomed := make(chan struct{})
	go func() {
		defer closeBoth()
		buf := make([]byte, 64<<10)
		for {
			n, err := client.Read(buf)
			if n > 0 {
				if hit, deliver := p.take(buf[:n]); hit {
					if !deliver {
						p.cut()
						return
					}
					close(doomed)
				}
				if _, err := server.Write(buf[:n]); err != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()

	// Server to client: raw until the connection is doomed; then message by
	// message (the client waits for each ReadyForQuery before it sends again,
	// so the doomed statement's answer starts on a message boundary).
	r := bufio.NewReaderSize(server, 64<<10)
	for {
		if _, err := r.Peek(1); err != nil {
			return
		}
		select {
		case <-doomed:
			p.withholdFrom(r, client)
			return
		default:
		}
		chunk, _ := r.Peek(r.Buffered())
		if _, err := client.Write(chunk); err != nil {
			return
		}
		r.Discard(len(chunk))
	}
}

// withholdFrom forwards the server's messages until BindComplete, then
// holds everything back until ReadyForQuery, and breaks the connection
// there.
func (p *cutProxy) withholdFrom(r *bufio.Reader, client net.Conn) {
	withhold := false
	for {
		hdr := make([]byte, 5)
		if _, err := io.ReadFull(r, hdr); err != nil {
			return
		}
		n := binary.BigEndian.Uint32(hdr[1:])
		if n < 4 {
			return
		}
		msg := append(hdr, make([]byte, n-4)...)
		if _, err := io.ReadFull(r, msg[5:]); err != nil {
			return
		}
		if hdr[0] == '2' { // BindComplete: the statement itself runs now
			withhold = true
		}
		if !withhold {
			if _, err := client.Write(msg); err != nil {
				return
			}
			continue
		}
		if hdr[0] == 'Z' { // ReadyForQuery: the implicit transaction is over
			p.cut()
			return
		}
	}
}

// openThroughCutProxy opens a ledger in a fresh schema of the test server
// through a proxy that can cut the connection at a statement.
func openThroughCutProxy(t *testing.T) (*postgres.Ledger, *cutProxy) {
	t.Helper()
	u, err := url.Parse(ledgertest.PostgresDSN(t))
	if err != nil || u.Host == "" {
		t.Fatalf("IDEM_TEST_POSTGRES must be a postgres:// URL for this test (%v)", err)
	}
	target := u.Host
	if u.Port() == "" {
		target = net.JoinHostPort(u.Hostname(), "5432")
	}
	proxy := startCutProxy(t, target)
	u.Host = proxy.addr()
	q := u.Query()
	q.Set("sslmode", "disable") // the proxy reads the protocol
	u.RawQuery = q.Encode()
	return openLedger(t, u.String(), freshSchema(t)), proxy
}
