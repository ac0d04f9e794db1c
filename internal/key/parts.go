package key

import (
	"strconv"
	"strings"
)

// EmptyPartError reports a key that looks built from an unset variable: it
// has an empty ':'-separated part, or no letter or digit at all.
type EmptyPartError struct {
	// Key is the refused key, unmodified (it passed Validate).
	Key string
	// Problem says what is wrong, e.g. "ends with ':'".
	Problem string
}

// Error names the key and the problem.
func (e *EmptyPartError) Error() string {
	return "key " + quote(e.Key) + " " + e.Problem
}

// CheckParts returns nil if k, a key that passed Validate, has no empty
// part, and otherwise an *EmptyPartError. A part is empty when k starts or
// ends with ':' or holds "::", except for the "::" before the 16 hex
// digits Build appends; a key with no letter or digit (such as "........")
// is refused too. Both are what an unset variable leaves behind in
// --key "deploy:prod:$SHA". Every key Build makes from non-empty parts
// passes.
//
// The check applies to keys a run is about to record; keys already
// recorded are looked up and purged without it.
func CheckParts(k string) error {
	body := k
	if hashedSuffix(k) {
		body = k[:len(k)-len(hashSep)-hashLen]
	}
	switch {
	case body == "" || body[0] == ':':
		return &EmptyPartError{Key: k, Problem: "starts with ':' (its first part is empty)"}
	case body[len(body)-1] == ':':
		return &EmptyPartError{Key: k, Problem: "ends with ':' (its last part is empty)"}
	}
	if i := strings.Index(body, "::"); i >= 0 {
		return &EmptyPartError{Key: k, Problem: "has '::' at byte " + strconv.Itoa(i+1) + " (an empty part)"}
	}
	if !hasAlnum(k) {
		return &EmptyPartError{Key: k, Problem: "has no letter or digit"}
	}
	return nil
}

// hashedSuffix reports whether k ends in the "::" and 16 lowercase hex
// digits Build appends.
func hashedSuffix(k string) bool {
	n := len(k) - hashLen
	if n < len(hashSep) || k[n-len(hashSep):n] != hashSep {
		return false
	}
	for i := n; i < len(k); i++ {
		if c := k[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// hasAlnum reports whether s holds an ASCII letter or digit.
func hasAlnum[T string | []byte](s T) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i] | 0x20; (c >= 'a' && c <= 'z') || (s[i] >= '0' && s[i] <= '9') {
			return true
		}
	}
	return false
}
