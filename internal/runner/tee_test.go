package runner

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// pattern is n bytes that differ from one offset to the next, so that a
// lost, repeated or reordered chunk shows.
func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i/4099)
	}
	return b
}

// feed writes data into a fresh pipe from another goroutine and returns
// its read end.
func feed(t *testing.T, data []byte) *os.File {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		w.Write(data)
		w.Close()
	}()
	t.Cleanup(func() { r.Close() })
	return r
}

func TestTeeReadFromLiveFile(t *testing.T) {
	const max = 1 << 20
	for _, tc := range []struct {
		name      string
		size      int
		flags     int // of the live file
		truncated bool
	}{
		{"past the capture: the rest is spliced", 3<<20 + 123, os.O_WRONLY, true},
		{"past the capture, O_APPEND: copied", 3<<20 + 123, os.O_WRONLY | os.O_APPEND, true},
		{"exactly the capture", max, os.O_WRONLY, false},
		{"less than the capture", 1000, os.O_WRONLY, false},
		{"nothing", 0, os.O_WRONLY, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := pattern(tc.size)
			path := filepath.Join(t.TempDir(), "live")
			live, err := os.OpenFile(path, tc.flags|os.O_CREATE, 0o600)
			if err != nil {
				t.Fatal(err)
			}
			defer live.Close()
			tw := &tee{live: live, capture: newCapture(max)}
			n, err := tw.ReadFrom(feed(t, data))
			if err != nil || n != int64(len(data)) {
				t.Fatalf("ReadFrom = %d, %v; want %d, nil", n, err, len(data))
			}
			got, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, data) {
				t.Fatalf("live file holds %d bytes, not the %d written (or not in order)", len(got), len(data))
			}
			want := data[:min(len(data), max)]
			if !bytes.Equal(tw.capture.buf, want) || tw.capture.truncated != tc.truncated {
				t.Fatalf("capture: %d bytes, truncated %v; want the first %d, truncated %v",
					len(tw.capture.buf), tw.capture.truncated, len(want), tc.truncated)
			}
		})
	}
}

func TestTeeReadFromNoCapture(t *testing.T) {
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	data := pattern(2<<20 + 5)
	tw := &tee{live: null} // --no-output: no capture at all
	if n, err := tw.ReadFrom(feed(t, data)); err != nil || n != int64(len(data)) {
		t.Fatalf("ReadFrom = %d, %v; want %d, nil", n, err, len(data))
	}
}

// A live stream that is a pipe is written by the tee itself; when its
// reader has gone, capturing goes on to the end.
func TestTeeReadFromClosedLivePipe(t *testing.T) {
	lr, lw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	lr.Close()
	defer lw.Close()
	data := pattern(3 << 20)
	tw := &tee{live: lw, capture: newCapture(2 << 20)}
	if n, err := tw.ReadFrom(feed(t, data)); err != nil || n != int64(len(data)) {
		t.Fatalf("ReadFrom = %d, %v; want %d, nil", n, err, len(data))
	}
	if tw.liveErr == nil {
		t.Fatal("a write to a pipe without a reader did not fail")
	}
	if !bytes.Equal(tw.capture.buf, data[:2<<20]) || !tw.capture.truncated {
		t.Fatalf("capture: %d bytes, truncated %v", len(tw.capture.buf), tw.capture.truncated)
	}
}

// Through os/exec, as the runner uses it: the child's pipe reaches ReadFrom
// wrapped by os/exec and os, and is still spliced from.
func TestTeeThroughExec(t *testing.T) {
	dir := t.TempDir()
	data := pattern(5<<20 + 7)
	in := filepath.Join(dir, "in")
	if err := os.WriteFile(in, data, 0o600); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	live, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	tw := &tee{live: live, capture: newCapture(1 << 20)}
	cmd := exec.Command("cat", in)
	cmd.Stdout = tw
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) || !bytes.Equal(tw.capture.buf, data[:1<<20]) || !tw.capture.truncated {
		t.Fatalf("live %d bytes (want %d), capture %d bytes truncated %v", len(got), len(data), len(tw.capture.buf), tw.capture.truncated)
	}
}
