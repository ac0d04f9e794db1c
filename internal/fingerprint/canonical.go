package fingerprint

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// MaxDepth is how deeply arrays and objects may nest in a payload that
// CanonicalJSON accepts; deeper documents are treated as not JSON. The parser
// recurses once per level, so the limit also bounds its stack.
const MaxDepth = 10000

// ErrNotJSON is wrapped by every error CanonicalJSON returns for input that
// is not a single valid JSON value; the caller then hashes the raw bytes.
var ErrNotJSON = errors.New("not JSON")

// DuplicateKeyError reports an object that holds the same key twice. The
// caller refuses such a payload rather than guess which member counts.
type DuplicateKeyError struct {
	// Key is the repeated key, decoded.
	Key string
	// Path is the JSON Pointer (RFC 6901) of the repeated member, e.g.
	// "/items/0/id".
	Path string
}

// Error quotes key and path with Go escapes, so the message is one line.
func (e *DuplicateKeyError) Error() string {
	return fmt.Sprintf("duplicate JSON object key %q at %q", e.Key, e.Path)
}

// CanonicalJSON returns the canonical form of b if b is a single JSON value
// (RFC 8259), optionally surrounded by JSON whitespace. Two documents that
// decode to the same value have the same canonical form, and two that do not
// have different ones.
//
// The canonical form has no insignificant whitespace; object members are
// sorted by the bytes of their decoded keys; strings are decoded and
// re-encoded with only \" \\ \b \f \n \r \t and \u00XX (other control
// characters) escaped, everything else, non-ASCII included, as raw UTF-8;
// numbers and true/false/null are copied exactly as written, so 1, 1.0 and
// 1e0 stay different and big integers keep every digit.
//
// Errors: an error wrapping ErrNotJSON if b is empty, has trailing data, is
// not valid JSON, is nested deeper than MaxDepth, or has a string that is not
// valid UTF-8 or escapes a lone UTF-16 surrogate (decoding those would
// replace them with U+FFFD and let distinct payloads collide); otherwise a
// *DuplicateKeyError for the first object, in closing order, that repeats a
// key (compared after decoding, so "a" and "\u0061" are the same key).
func CanonicalJSON(b []byte) ([]byte, error) {
	p := parser{in: b, out: make([]byte, 0, len(b))}
	p.space()
	if err := p.value(0); err != nil {
		return nil, err
	}
	p.space()
	if p.pos != len(p.in) {
		return nil, p.fail("trailing data after the JSON value")
	}
	if p.dup != nil {
		return nil, p.dup
	}
	return p.out, nil
}

// parser is a recursive-descent JSON parser that writes the canonical form
// as it goes. Numbers and literals are validated and copied, never decoded.
type parser struct {
	in  []byte
	pos int
	out []byte
	// path holds the members and elements being parsed, for DuplicateKeyError.
	path []step
	// dup is the first duplicate key found. Parsing goes on after it, so
	// that a document that is also malformed reports ErrNotJSON.
	dup *DuplicateKeyError
	// members is a stack of the members of the objects being parsed, and
	// scratch and body are reused buffers, to save allocations.
	members []member
	scratch []byte
	body    []byte
}

// step is one level of a JSON Pointer: an object key or an array index.
type step struct {
	key   string
	index int // -1 in an object
}

// member is one object member already written to out: the bytes
// out[start:end] are its canonical `"key":value`.
type member struct {
	key        string
	start, end int
}

func (p *parser) fail(msg string) error {
	return fmt.Errorf("%w: offset %d: %s", ErrNotJSON, p.pos, msg)
}

// space skips JSON whitespace.
func (p *parser) space() {
	for p.pos < len(p.in) {
		switch p.in[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

// value parses one value at p.pos (whitespace already skipped) nested depth
// levels deep.
func (p *parser) value(depth int) error {
	if p.pos >= len(p.in) {
		return p.fail("unexpected end of input")
	}
	switch c := p.in[p.pos]; {
	case c == '{':
		return p.object(depth + 1)
	case c == '[':
		return p.array(depth + 1)
	case c == '"':
		s, err := p.string()
		if err != nil {
			return err
		}
		p.out = appendString(p.out, s)
		return nil
	case c == '-' || c >= '0' && c <= '9':
		return p.number()
	case c == 't':
		return p.literal("true")
	case c == 'f':
		return p.literal("false")
	case c == 'n':
		return p.literal("null")
	default:
		return p.fail(fmt.Sprintf("unexpected %q", c))
	}
}

func (p *parser) literal(lit string) error {
	if len(p.in)-p.pos < len(lit) || string(p.in[p.pos:p.pos+len(lit)]) != lit {
		return p.fail("invalid literal")
	}
	p.out = append(p.out, lit...)
	p.pos += len(lit)
	return nil
}

// number checks the RFC 8259 number grammar
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? and copies it verbatim.
func (p *parser) number() error {
	start := p.pos
	if p.in[p.pos] == '-' {
		p.pos++
	}
	switch {
	case p.pos < len(p.in) && p.in[p.pos] == '0':
		p.pos++
	case p.digits() == 0:
		return p.fail("invalid number")
	}
	if p.pos < len(p.in) && p.in[p.pos] == '.' {
		p.pos++
		if p.digits() == 0 {
			return p.fail("invalid number: no digits after '.'")
		}
	}
	if p.pos < len(p.in) && (p.in[p.pos] == 'e' || p.in[p.pos] == 'E') {
		p.pos++
		if p.pos < len(p.in) && (p.in[p.pos] == '+' || p.in[p.pos] == '-') {
			p.pos++
		}
		if p.digits() == 0 {
			return p.fail("invalid number: no digits in exponent")
		}
	}
	p.out = append(p.out, p.in[start:p.pos]...)
	return nil
}

// digits skips ASCII digits and returns how many there were.
func (p *parser) digits() int {
	start := p.pos
	for p.pos < len(p.in) && p.in[p.pos] >= '0' && p.in[p.pos] <= '9' {
		p.pos++
	}
	return p.pos - start
}

func (p *parser) array(depth int) error {
	if depth > MaxDepth {
		return p.fail(fmt.Sprintf("nested deeper than %d", MaxDepth))
	}
	p.pos++ // '['
	p.out = append(p.out, '[')
	p.space()
	if p.pos < len(p.in) && p.in[p.pos] == ']' {
		p.pos++
		p.out = append(p.out, ']')
		return nil
	}
	p.path = append(p.path, step{})
	for i := 0; ; i++ {
		if i > 0 {
			p.out = append(p.out, ',')
		}
		p.path[len(p.path)-1] = step{index: i}
		p.space()
		if err := p.value(depth); err != nil {
			return err
		}
		p.space()
		if p.pos >= len(p.in) {
			return p.fail("unexpected end of input in array")
		}
		c := p.in[p.pos]
		p.pos++
		if c == ']' {
			break
		}
		if c != ',' {
			p.pos--
			return p.fail("expected ',' or ']' in array")
		}
	}
	p.path = p.path[:len(p.path)-1]
	p.out = append(p.out, ']')
	return nil
}

func (p *parser) object(depth int) error {
	if depth > MaxDepth {
		return p.fail(fmt.Sprintf("nested deeper than %d", MaxDepth))
	}
	p.pos++ // '{'
	open := len(p.out)
	p.out = append(p.out, '{')
	p.space()
	if p.pos < len(p.in) && p.in[p.pos] == '}' {
		p.pos++
		p.out = append(p.out, '}')
		return nil
	}
	base := len(p.members)
	p.path = append(p.path, step{})
	for {
		if len(p.members) > base {
			p.out = append(p.out, ',')
		}
		p.space()
		if p.pos >= len(p.in) || p.in[p.pos] != '"' {
			return p.fail("expected a string key in object")
		}
		k, err := p.string()
		if err != nil {
			return err
		}
		key := string(k)
		p.space()
		if p.pos >= len(p.in) || p.in[p.pos] != ':' {
			return p.fail("expected ':' after object key")
		}
		p.pos++
		p.space()
		start := len(p.out)
		p.out = appendString(p.out, key)
		p.out = append(p.out, ':')
		p.path[len(p.path)-1] = step{key: key, index: -1}
		if err := p.value(depth); err != nil {
			return err
		}
		p.members = append(p.members, member{key: key, start: start, end: len(p.out)})
		p.space()
		if p.pos >= len(p.in) {
			return p.fail("unexpected end of input in object")
		}
		c := p.in[p.pos]
		p.pos++
		if c == '}' {
			break
		}
		if c != ',' {
			p.pos--
			return p.fail("expected ',' or '}' in object")
		}
	}
	p.sortMembers(open, p.members[base:])
	p.members = p.members[:base]
	p.path = p.path[:len(p.path)-1]
	p.out = append(p.out, '}')
	return nil
}

// sortMembers rewrites out[open+1:], the members of the object opened at
// out[open], in key order, and records the first duplicate key.
func (p *parser) sortMembers(open int, members []member) {
	byKey := func(a, b member) int { return strings.Compare(a.key, b.key) }
	if slices.IsSortedFunc(members, byKey) && !hasAdjacentDup(members) {
		return // the common case: nothing to move
	}
	slices.SortStableFunc(members, byKey)
	for i := 1; i < len(members) && p.dup == nil; i++ {
		if members[i].key == members[i-1].key {
			p.path[len(p.path)-1] = step{key: members[i].key, index: -1}
			p.dup = &DuplicateKeyError{Key: members[i].key, Path: p.pointer()}
		}
	}
	if p.dup != nil {
		return // the output is discarded anyway
	}
	p.body = append(p.body[:0], p.out[open+1:]...)
	p.out = p.out[:open+1]
	for i, m := range members {
		if i > 0 {
			p.out = append(p.out, ',')
		}
		p.out = append(p.out, p.body[m.start-open-1:m.end-open-1]...)
	}
}

func hasAdjacentDup(members []member) bool {
	for i := 1; i < len(members); i++ {
		if members[i].key == members[i-1].key {
			return true
		}
	}
	return false
}

// pointer renders p.path, whose last step is the duplicate member, as a JSON
// Pointer.
func (p *parser) pointer() string {
	var b strings.Builder
	for _, s := range p.path {
		b.WriteByte('/')
		if s.index >= 0 {
			b.WriteString(strconv.Itoa(s.index))
			continue
		}
		b.WriteString(strings.NewReplacer("~", "~0", "/", "~1").Replace(s.key))
	}
	return b.String()
}

// string decodes the JSON string at p.pos (at its opening quote) into a
// buffer that the next call reuses. It rejects raw control characters,
// invalid UTF-8, unknown escapes and escapes of lone surrogates.
func (p *parser) string() ([]byte, error) {
	p.pos++ // '"'
	d := p.scratch[:0]
	for {
		// Copy the run of bytes that need no decoding in one go.
		start := p.pos
		for p.pos < len(p.in) {
			c := p.in[p.pos]
			if c < 0x20 || c == '"' || c == '\\' || c >= utf8.RuneSelf {
				break
			}
			p.pos++
		}
		d = append(d, p.in[start:p.pos]...)
		if p.pos >= len(p.in) {
			return nil, p.fail("unterminated string")
		}
		switch c := p.in[p.pos]; {
		case c == '"':
			p.pos++
			p.scratch = d
			return d, nil
		case c < 0x20:
			return nil, p.fail("control character in string")
		case c >= utf8.RuneSelf:
			r, size := utf8.DecodeRune(p.in[p.pos:])
			if r == utf8.RuneError && size == 1 {
				return nil, p.fail("invalid UTF-8 in string")
			}
			d = append(d, p.in[p.pos:p.pos+size]...)
			p.pos += size
		default: // '\\'
			r, err := p.escape()
			if err != nil {
				return nil, err
			}
			d = utf8.AppendRune(d, r)
		}
	}
}

// escape decodes the escape sequence at p.pos (at its backslash), joining a
// UTF-16 surrogate pair into one rune.
func (p *parser) escape() (rune, error) {
	if p.pos+1 >= len(p.in) {
		return 0, p.fail("unterminated escape")
	}
	c := p.in[p.pos+1]
	p.pos += 2
	switch c {
	case '"', '\\', '/':
		return rune(c), nil
	case 'b':
		return '\b', nil
	case 'f':
		return '\f', nil
	case 'n':
		return '\n', nil
	case 'r':
		return '\r', nil
	case 't':
		return '\t', nil
	case 'u':
	default:
		p.pos -= 2
		return 0, p.fail(fmt.Sprintf("invalid escape %q", "\\"+string(rune(c))))
	}
	r, ok := p.hex4()
	if !ok {
		return 0, p.fail(`invalid \u escape`)
	}
	if !utf16.IsSurrogate(r) {
		return r, nil
	}
	if r < 0xdc00 && p.pos+1 < len(p.in) && p.in[p.pos] == '\\' && p.in[p.pos+1] == 'u' {
		p.pos += 2
		if lo, ok := p.hex4(); ok {
			if pair := utf16.DecodeRune(r, lo); pair != utf8.RuneError {
				return pair, nil
			}
		}
	}
	return 0, p.fail("lone UTF-16 surrogate in string")
}

// hex4 reads the four hex digits of a \u escape.
func (p *parser) hex4() (rune, bool) {
	if p.pos+4 > len(p.in) {
		return 0, false
	}
	var r rune
	for _, c := range p.in[p.pos : p.pos+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	p.pos += 4
	return r, true
}

// appendString appends s, which is valid UTF-8, as a canonical JSON string.
func appendString[S string | []byte](b []byte, s S) []byte {
	const hexDigits = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\b':
			b = append(b, '\\', 'b')
		case '\f':
			b = append(b, '\\', 'f')
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default:
			b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		}
		start = i + 1
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
