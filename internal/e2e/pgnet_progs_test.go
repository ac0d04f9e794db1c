package e2e

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"time"
)

// tcpproxy LISTEN_ADDR TARGET_ADDR forwards every connection to LISTEN_ADDR
// to TARGET_ADDR, both ways, until it is killed. A test that SIGSTOPs it
// freezes the path to the server: connections stay open, nothing passes.
func tcpproxy() {
	ln, err := net.Listen("tcp", os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	fmt.Println("listening")
	for {
		c, err := ln.Accept()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		go func() {
			defer c.Close()
			s, err := net.Dial("tcp", os.Args[2])
			if err != nil {
				return
			}
			defer s.Close()
			go io.Copy(s, c)
			io.Copy(c, s)
		}()
	}
}

// heartbeat FILE writes "PID START_UNIX_NANO" to FILE (whole, by rename),
// then sleeps until a signal ends it (SIGTERM's default action).
func heartbeat() {
	tmp := os.Args[1] + ".tmp"
	line := fmt.Sprintf("%d %d\n", os.Getpid(), time.Now().UnixNano())
	if err := os.WriteFile(tmp, []byte(line), 0o644); err != nil {
		os.Exit(2)
	}
	if err := os.Rename(tmp, os.Args[1]); err != nil {
		os.Exit(2)
	}
	for {
		time.Sleep(time.Hour)
	}
}

// nsinit is the init of a simulated host's PID namespace (nsHost): it
// reaps whatever ends there, orphans included, as a host's init does, so
// that a dead command does not linger as a zombie that the host's idem
// would wait for. It runs until the namespace is killed.
func nsinit() {
	for {
		var ws syscall.WaitStatus
		if _, err := syscall.Wait4(-1, &ws, 0, nil); errors.Is(err, syscall.ECHILD) {
			time.Sleep(20 * time.Millisecond)
		}
	}
}
