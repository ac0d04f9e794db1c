package key

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"unicode/utf8"
)

// Hashed keys end in hashSep followed by hashLen lowercase hex digits.
const (
	hashSep = "::"
	hashLen = 16 // 64 bits of SHA-256: collisions need ~2^32 distinct part lists
	// prefixMax keeps a hashed key within MaxLen.
	prefixMax = MaxLen - len(hashSep) - hashLen
	// hashDomain separates these hashes from every other SHA-256 idem takes.
	hashDomain = "idem-key-v1"
)

// Build returns a valid key made from parts (the arguments of
// `idem key PART...`). It never fails: its result always passes Validate.
// The same parts always give the same key, and different part lists give
// different keys (up to a 64-bit hash collision).
//
// The algorithm:
//
//  1. Join the parts with ':'. Within a part, every byte that is an allowed
//     key character is kept as is, ':' included; every other UTF-8 rune
//     becomes one '_' ("café" gives "caf_"), and so does every byte that is
//     not part of valid UTF-8.
//  2. If no byte was mapped, no part contains ':', there is at least one
//     part, no part is empty, the joined result holds a letter or a digit
//     and is 8-128 bytes long, the joined result is the key.
//  3. Otherwise the key is the joined result cut to its first 110 bytes,
//     with every ':' that starts or ends it or follows another ':' made
//     '_' (so that the readable part has no empty part, as CheckParts
//     wants), then "::", then the first 16 lowercase hex digits of the SHA-256 of:
//     "idem-key-v1", the number of parts as a big-endian uint64, and for
//     each part its length in bytes as a big-endian uint64 followed by its
//     original bytes.
//
// Why this is injective: a key from step 2 has no empty segment between
// colons, so it never contains "::" and splitting it on ':' gives back the
// parts; a key from step 3 always contains "::", and two of them are equal
// only if their hashes of the unambiguous length-prefixed encoding are.
func Build(parts ...string) string {
	out := make([]byte, 0, 64)
	plain := len(parts) > 0
	for i, p := range parts {
		if i > 0 {
			out = append(out, ':')
		}
		if p == "" {
			plain = false
		}
		for j := 0; j < len(p); {
			c := p[j]
			if allowed(c) {
				if c == ':' {
					plain = false
				}
				out = append(out, c)
				j++
				continue
			}
			plain = false
			out = append(out, '_')
			if c < utf8.RuneSelf {
				j++
				continue
			}
			_, size := utf8.DecodeRuneInString(p[j:]) // size 1 for an invalid byte
			j += size
		}
	}
	if plain && len(out) >= MinLen && len(out) <= MaxLen && hasAlnum(out) {
		return string(out)
	}
	if len(out) > prefixMax {
		out = out[:prefixMax]
	}
	for i, c := range out {
		if c == ':' && (i == 0 || i == len(out)-1 || out[i-1] == ':') {
			out[i] = '_'
		}
	}
	out = append(out, hashSep...)
	sum := partsHash(parts)
	out = hex.AppendEncode(out, sum[:hashLen/2])
	return string(out)
}

// partsHash is the SHA-256 of the length-prefixed encoding of parts.
func partsHash(parts []string) [sha256.Size]byte {
	h := sha256.New()
	var n [8]byte
	h.Write([]byte(hashDomain))
	binary.BigEndian.PutUint64(n[:], uint64(len(parts)))
	h.Write(n[:])
	for _, p := range parts {
		binary.BigEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write([]byte(p))
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}
