package ledger

import (
	"bytes"
	"testing"
)

func TestLastLine(t *testing.T) {
	long := bytes.Repeat([]byte("é"), ReasonMax) // two bytes each
	for _, tc := range []struct {
		name string
		in   []byte
		want string
	}{
		{"none", nil, ""},
		{"blank lines only", []byte("\n  \n\t\n"), ""},
		{"last non-empty line", []byte("first\nsecond\n\n  \n"), "second"},
		{"no trailing newline", []byte("a\nb"), "b"},
		{"trimmed", []byte("  x y \r\n"), "x y"},
		{"one line", []byte("only"), "only"},
		{"NUL and invalid UTF-8", []byte("a\x00b\xffc\n"), "a\uFFFDb\uFFFDc"},
		{"cut to ReasonMax", append(long, '\n'), string(bytes.Repeat([]byte("é"), ReasonMax/2))},
		{"a rune cut in two is dropped", append([]byte("a"), long...), "a" + string(bytes.Repeat([]byte("é"), ReasonMax/2-1))},
	} {
		if got := LastLine(tc.in); got != tc.want {
			t.Errorf("%s: LastLine(%q) = %q, want %q", tc.name, tc.in, got, tc.want)
		}
	}
}

func TestTail(t *testing.T) {
	b := bytes.Repeat([]byte("0123456789"), TailMax)
	if got := Tail(b); len(got) != TailMax || !bytes.Equal(got, b[len(b)-TailMax:]) {
		t.Errorf("Tail of %d bytes: %d bytes, want the last %d", len(b), len(got), TailMax)
	}
	if got := Tail([]byte("short")); string(got) != "short" {
		t.Errorf("Tail(short) = %q", got)
	}
	r := FinishRequest{OutputStored: true, Stderr: []byte("captured")}
	if got := r.Tail(); string(got) != "captured" {
		t.Errorf("FinishRequest.Tail without StderrTail = %q, want the end of Stderr", got)
	}
	r.StderrTail = []byte("the end")
	if got := r.Tail(); string(got) != "the end" {
		t.Errorf("FinishRequest.Tail = %q, want StderrTail", got)
	}
	r.OutputStored = false
	if got := r.Tail(); got != nil {
		t.Errorf("FinishRequest.Tail with --no-output = %q, want nil", got)
	}
}
