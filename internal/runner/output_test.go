package runner

import (
	"bytes"
	"errors"
	"os"
	"syscall"
	"testing"
)

func TestCaptureBounded(t *testing.T) {
	for _, tc := range []struct {
		name      string
		max       int64
		writes    []string
		want      string
		truncated bool
	}{
		{"fits", 10, []string{"abc", "def"}, "abcdef", false},
		{"exactly full", 6, []string{"abc", "def"}, "abcdef", false},
		{"cut inside a write", 4, []string{"abc", "def"}, "abcd", true},
		{"full, then more", 3, []string{"abc", "d"}, "abc", true},
		{"full, then an empty write", 3, []string{"abc", ""}, "abc", false},
		{"nothing kept", 0, []string{"x"}, "", true},
		{"nothing written", 0, nil, "", false},
		{"binary", 5, []string{"\x00\xff\x00", "\n\r\x01"}, "\x00\xff\x00\n\r", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCapture(tc.max)
			for _, w := range tc.writes {
				if n, err := c.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("Write(%q) = %d, %v; a capture takes every byte", w, n, err)
				}
			}
			if string(c.buf) != tc.want || c.truncated != tc.truncated {
				t.Errorf("captured %q truncated %v, want %q %v", c.buf, c.truncated, tc.want, tc.truncated)
			}
			if int64(cap(c.buf)) > 2*tc.max+64 {
				t.Errorf("capture grew to %d bytes for a limit of %d", cap(c.buf), tc.max)
			}
		})
	}
	// A nil capture (--no-output) swallows everything.
	var none *capture
	if n, err := none.Write([]byte("secret")); n != 6 || err != nil {
		t.Errorf("nil capture Write = %d, %v", n, err)
	}
}

// failingWriter is a closed pipe: every write fails.
type failingWriter struct{ calls int }

func (f *failingWriter) Write(p []byte) (int, error) {
	f.calls++
	return 0, syscall.EPIPE
}

func TestTeeSurvivesAClosedStream(t *testing.T) {
	live := &failingWriter{}
	c := newCapture(1 << 20)
	tw := &tee{live: live, capture: c}
	for _, s := range []string{"first\n", "second\n", "third\n"} {
		if n, err := tw.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("tee.Write(%q) = %d, %v; the child must never see idem's closed stdout", s, n, err)
		}
	}
	if got := string(c.buf); got != "first\nsecond\nthird\n" {
		t.Errorf("captured %q: capturing must go on after the stream closed", got)
	}
	if live.calls != 1 {
		t.Errorf("%d writes to the closed stream, want 1 (it stays closed)", live.calls)
	}
	if !errors.Is(tw.liveErr, syscall.EPIPE) {
		t.Errorf("liveErr = %v", tw.liveErr)
	}
}

func TestTeeStreamsAndCaptures(t *testing.T) {
	var live bytes.Buffer
	c := newCapture(4)
	tw := &tee{live: &live, capture: c}
	tw.Write([]byte("hello"))
	tw.Write([]byte(" world"))
	if live.String() != "hello world" {
		t.Errorf("streamed %q, want all of it whatever --max-output", live.String())
	}
	if string(c.buf) != "hell" || !c.truncated {
		t.Errorf("captured %q truncated %v", c.buf, c.truncated)
	}
	// No capture (--no-output) and no stream (--stdout final holds it elsewhere).
	var live2 bytes.Buffer
	tw = &tee{live: &live2}
	if n, err := tw.Write([]byte("x")); n != 1 || err != nil || live2.String() != "x" {
		t.Errorf("tee without capture: %d, %v, %q", n, err, live2.String())
	}
	tw = &tee{capture: newCapture(10)}
	if n, err := tw.Write([]byte("y")); n != 1 || err != nil || string(tw.capture.buf) != "y" {
		t.Errorf("tee without stream: %d, %v", n, err)
	}
}

func TestSpool(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	big := make([]byte, 3*spoolMemory+17)
	for i := range big {
		big[i] = byte(i * 7)
	}
	for _, tc := range []struct {
		name   string
		chunks [][]byte
	}{
		{"empty", nil},
		{"small", [][]byte{[]byte("abc"), []byte("\x00\xff")}},
		{"exactly the memory", [][]byte{big[:spoolMemory]}},
		{"one byte past the memory", [][]byte{big[:spoolMemory], big[spoolMemory : spoolMemory+1]}},
		{"large, many writes", [][]byte{big[:1000], big[1000 : 2*spoolMemory], big[2*spoolMemory:]}},
		{"large, one write", [][]byte{big}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &spool{}
			var want []byte
			for _, c := range tc.chunks {
				if n, err := s.Write(c); n != len(c) || err != nil {
					t.Fatalf("spool.Write = %d, %v", n, err)
				}
				want = append(want, c...)
			}
			// The temp file, if any, is unlinked at once: nothing is left
			// behind, even if idem is killed.
			if entries, _ := os.ReadDir(tmp); len(entries) != 0 {
				t.Errorf("spool left %d files in TMPDIR", len(entries))
			}
			var out bytes.Buffer
			if err := s.emit(&out); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(out.Bytes(), want) {
				t.Errorf("emitted %d bytes, want %d (byte for byte)", out.Len(), len(want))
			}
			if s.file != nil || s.mem != nil {
				t.Errorf("emit did not release the spool")
			}
		})
	}
	// discard after a spill closes the file.
	s := &spool{}
	s.Write(big)
	f := s.file
	if f == nil {
		t.Fatal("a large spool did not spill to a file")
	}
	s.discard()
	if _, err := f.Stat(); err == nil {
		t.Error("discard left the spool file open")
	}
}
