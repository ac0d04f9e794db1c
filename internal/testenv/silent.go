package testenv

import (
	"net"
	"sync"
	"testing"
)

// SilentListener starts a loopback TCP listener that accepts connections
// and never answers them, as a hung server or pooler does, and returns its
// address. It closes, with its connections, when the test ends.
func SilentListener(t testing.TB) string {
	t.Helper()
	addr, _ := CountingSilentListener(t)
	return addr
}

// CountingSilentListener is SilentListener that also says how many
// connections it has accepted so far: how often a client tried.
func CountingSilentListener(t testing.TB) (addr string, accepted func() int) {
	t.Helper()
	return GreetingListener(t, "")
}

// GreetingListener is CountingSilentListener that first writes greeting
// to each connection, as a server that speaks before its client does (an
// SSH server's version line), then says nothing more.
func GreetingListener(t testing.TB, greeting string) (addr string, accepted func() int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu   sync.Mutex
		held []net.Conn
		done = make(chan struct{})
	)
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if greeting != "" {
				c.Write([]byte(greeting))
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		for _, c := range held {
			c.Close()
		}
	})
	return ln.Addr().String(), func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(held)
	}
}
