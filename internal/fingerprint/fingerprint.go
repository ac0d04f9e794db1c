// Package fingerprint computes the fingerprint idem records with each key:
// a SHA-256 over a canonical encoding of what the command was asked to do
// (its argv, payload, chosen environment variables and spooled stdin).
//
// The same key with a different fingerprint is refused, so the encoding is
// built to make equal requests hash equal (JSON payloads are canonicalised)
// and different requests hash different: every variable-length field is
// length-prefixed, every section is tagged, and the whole is versioned.
package fingerprint

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
)

// Version tags the encoding; changing the encoding means a new tag.
const Version = "idem-fp-v1"

// Input is what a fingerprint covers.
type Input struct {
	// Argv is the command and its arguments.
	Argv []string
	// Payload is the --payload value or --payload-file content; it is
	// ignored unless HasPayload, so an absent payload and an empty one differ.
	Payload    []byte
	HasPayload bool
	// Env holds the --fingerprint-env variables, in any order.
	Env []EnvVar
	// Stdin is the SHA-256 of the spooled stdin, or nil if stdin was not
	// spooled (an empty non-nil slice counts as present).
	Stdin []byte
}

// EnvVar is one environment variable as the command would see it.
type EnvVar struct {
	Name  string
	Value string
	// Set is false for an unset variable, which differs from an empty one.
	Set bool
}

// Sum returns the lowercase hex SHA-256 of the canonical encoding of in.
//
// The encoding is a sequence of fields, each a big-endian uint64 length and
// then its bytes; counts are big-endian uint64s and flags single bytes:
//
//	"idem-fp-v1"
//	"argv", count, each argument
//	"payload", then "none"
//	               | "json", the CanonicalJSON form
//	               | "raw", the payload bytes (when it is not JSON)
//	"env", count, then per variable sorted by name:
//	       name, flag 0 (unset) | flag 1 (set) and the SHA-256 of the value
//	"stdin", then "none" | "sha256", Stdin
//
// Errors: a *DuplicateKeyError if the payload is JSON with a duplicate key,
// which the caller must refuse; an error if Env names a variable twice with
// different values (repeats that agree count once).
func Sum(in Input) (string, error) {
	enc, err := encode(in)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(enc)
	return hex.EncodeToString(sum[:]), nil
}

// encode returns the encoding Sum hashes.
func encode(in Input) ([]byte, error) {
	var payload []byte
	payloadTag := "none"
	if in.HasPayload {
		canon, err := CanonicalJSON(in.Payload)
		switch {
		case err == nil:
			payloadTag, payload = "json", canon
		case errors.Is(err, ErrNotJSON):
			payloadTag, payload = "raw", in.Payload
		default:
			return nil, err
		}
	}
	env, err := sortEnv(in.Env)
	if err != nil {
		return nil, err
	}

	size := 256 + len(payload)
	for _, a := range in.Argv {
		size += 8 + len(a)
	}
	b := make([]byte, 0, size)
	b = appendField(b, Version)

	b = appendField(b, "argv")
	b = binary.BigEndian.AppendUint64(b, uint64(len(in.Argv)))
	for _, a := range in.Argv {
		b = appendField(b, a)
	}

	b = appendField(b, "payload")
	b = appendField(b, payloadTag)
	if in.HasPayload {
		b = appendField(b, payload)
	}

	b = appendField(b, "env")
	b = binary.BigEndian.AppendUint64(b, uint64(len(env)))
	for _, v := range env {
		b = appendField(b, v.Name)
		if !v.Set {
			b = append(b, 0)
			continue
		}
		b = append(b, 1)
		h := sha256.Sum256([]byte(v.Value))
		b = appendField(b, h[:])
	}

	b = appendField(b, "stdin")
	if in.Stdin == nil {
		b = appendField(b, "none")
	} else {
		b = appendField(b, "sha256")
		b = appendField(b, in.Stdin)
	}
	return b, nil
}

func appendField[T string | []byte](b []byte, f T) []byte {
	b = binary.BigEndian.AppendUint64(b, uint64(len(f)))
	return append(b, f...)
}

// sortEnv returns a sorted copy of env with exact repeats removed. The
// value of an unset variable is ignored.
func sortEnv(env []EnvVar) ([]EnvVar, error) {
	sorted := make([]EnvVar, 0, len(env))
	for _, v := range env {
		if !v.Set {
			v.Value = ""
		}
		sorted = append(sorted, v)
	}
	slices.SortFunc(sorted, func(a, b EnvVar) int { return cmp.Compare(a.Name, b.Name) })
	out := sorted[:0]
	for _, v := range sorted {
		if n := len(out); n > 0 && out[n-1].Name == v.Name {
			if out[n-1] != v {
				// Never print the values: they may be secrets.
				return nil, fmt.Errorf("fingerprint env %q given twice with different values", v.Name)
			}
			continue
		}
		out = append(out, v)
	}
	return out, nil
}
