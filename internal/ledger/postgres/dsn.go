package postgres

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem/internal/ledger"
	"github.com/idemhq/idem/internal/ledger/pgdsn"
)

// The forms of a DSN: a postgres:// or postgresql:// URL, or libpq's
// keyword/value string ("host=db1 dbname=ops user=idem"). What libpq would
// take for a connection string never names a SQLite file.

// IsDSN reports whether a --ledger value names a PostgreSQL database
// rather than a file (pgdsn.Is). CheckDSN says whether idem can use it.
func IsDSN(s string) bool { return pgdsn.Is(s) }

// spaces are what libpq skips between keyword/value pairs (isspace).
const spaces = pgdsn.Spaces

// CheckDSN returns why a keyword/value DSN (see IsDSN) cannot be used: it
// does not parse as libpq reads it, names nothing, or has a keyword idem
// does not know. The error never quotes a value, nor a word that follows a
// password. URLs are checked when they are opened: nil.
func CheckDSN(s string) error {
	if pgdsn.IsURL(s) {
		return nil
	}
	pairs, err := parseKeywordValue(s)
	if err != nil {
		return fmt.Errorf("the ledger's connection string does not parse: %w", err)
	}
	if len(pairs) == 0 {
		return fmt.Errorf("the ledger's connection string is empty")
	}
	afterPassword := false
	for _, p := range pairs {
		if !keyword(p.key) {
			what := "an unknown keyword"
			if libpqOnly(p.key) {
				what = "a keyword idem does not support"
			}
			if afterPassword || len(p.key) > 40 {
				// A password with a space, unquoted, reads as more pairs.
				return fmt.Errorf("the ledger's connection string has %s after its password (quote a value with spaces: password='...')", what)
			}
			return fmt.Errorf("the ledger's connection string has %s: %q", what, p.key)
		}
		afterPassword = afterPassword || secretKey(p.key)
	}
	return nil
}

// keyword reports whether k is one of libpq's keywords that pgx reads, or
// one of pgx's own.
func keyword(k string) bool {
	switch k {
	case "host", "port", "dbname", "database", "user", "password",
		"passfile", "connect_timeout", "sslmode", "sslkey", "sslcert",
		"sslcertmode", "sslrootcert", "sslnegotiation", "sslpassword", "sslsni",
		"krbspn", "krbsrvname", "target_session_attrs", "service", "servicefile",
		"min_protocol_version", "max_protocol_version", "channel_binding", "require_auth",
		"application_name", "options",
		"default_query_exec_mode", "statement_cache_capacity", "description_cache_capacity":
		return true
	}
	return false
}

// libpqOnly reports whether k is a libpq keyword pgx does not read (it
// would send it to the server as a run-time parameter, which the server
// refuses).
func libpqOnly(k string) bool {
	switch k {
	case "hostaddr", "client_encoding", "fallback_application_name", "keepalives",
		"keepalives_idle", "keepalives_interval", "keepalives_count", "tcp_user_timeout",
		"replication", "gssencmode", "sslcompression", "sslcrl", "sslcrldir",
		"requirepeer", "ssl_min_protocol_version", "ssl_max_protocol_version", "gsslib",
		"gssdelegation", "load_balance_hosts", "sslkeylogfile", "scram_client_key",
		"scram_server_key", "oauth_issuer", "oauth_client_id", "oauth_client_secret",
		"oauth_scope":
		return true
	}
	return false
}

// secretKey reports whether a keyword or query parameter holds a secret.
func secretKey(k string) bool {
	return strings.Contains(strings.ToLower(k), "password")
}

type kvPair struct{ key, val string }

// parseKeywordValue reads s as libpq's conninfo_parse does: pairs
// keyword = value separated by spaces; a value is a word or is quoted in
// single quotes, and a backslash takes the next character literally in
// either. Errors name no value.
func parseKeywordValue(s string) ([]kvPair, error) {
	if strings.IndexByte(s, 0) >= 0 {
		return nil, fmt.Errorf("a NUL byte")
	}
	var pairs []kvPair
	for s = strings.TrimLeft(s, spaces); s != ""; s = strings.TrimLeft(s, spaces) {
		end := strings.IndexAny(s, spaces+"=")
		if end < 0 {
			end = len(s)
		}
		key := s[:end]
		s = strings.TrimLeft(s[end:], spaces)
		if !strings.HasPrefix(s, "=") {
			return nil, fmt.Errorf("a word without \"=\" after it (write keyword=value)")
		}
		s = strings.TrimLeft(s[1:], spaces)
		var val strings.Builder
		if strings.HasPrefix(s, "'") {
			i := 1
			for ; i < len(s) && s[i] != '\''; i++ {
				if s[i] == '\\' {
					i++
					if i == len(s) {
						break
					}
				}
				val.WriteByte(s[i])
			}
			if i >= len(s) {
				return nil, fmt.Errorf("an unterminated quoted value (after %s=)", safeKey(key))
			}
			s = s[i+1:]
		} else {
			i := 0
			for ; i < len(s) && !strings.ContainsRune(spaces, rune(s[i])); i++ {
				if s[i] == '\\' {
					i++
					if i == len(s) {
						break
					}
				}
				val.WriteByte(s[i])
			}
			s = s[min(i, len(s)):]
		}
		pairs = append(pairs, kvPair{key, val.String()})
	}
	return pairs, nil
}

// safeKey is key for a message, unless it cannot be a keyword.
func safeKey(key string) string {
	if keyword(key) || libpqOnly(key) {
		return key
	}
	return "a keyword"
}

// formatKeywordValue writes pairs back as a keyword/value string that
// libpq and pgx read as the same pairs.
func formatKeywordValue(pairs []kvPair) string {
	var b strings.Builder
	for i, p := range pairs {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(p.key + "=")
		if p.val != "" && !strings.ContainsAny(p.val, spaces+`'\`) {
			b.WriteString(p.val)
			continue
		}
		b.WriteByte('\'')
		for _, c := range []byte(p.val) {
			if c == '\'' || c == '\\' {
				b.WriteByte('\\')
			}
			b.WriteByte(c)
		}
		b.WriteByte('\'')
	}
	return b.String()
}

// WithoutPassword returns dsn with every password taken out (a URL's user
// info password and its password and sslpassword parameters; the
// password and sslpassword keywords), and whether it had one. The rest of
// a URL is kept as written; a keyword/value string is written anew (its
// pairs unchanged). ok is false when dsn does not parse, or when a URL
// holds an '@' past its user info (an unencoded character in the
// password), where nothing can be taken out reliably.
func WithoutPassword(dsn string) (clean string, had, ok bool) {
	if !pgdsn.IsURL(dsn) {
		pairs, err := parseKeywordValue(dsn)
		if err != nil {
			return "", false, false
		}
		kept := pairs[:0:0]
		for _, p := range pairs {
			if secretKey(p.key) {
				had = true
				continue
			}
			kept = append(kept, p)
		}
		if !had {
			return dsn, false, true
		}
		return formatKeywordValue(kept), true, true
	}
	scheme, rest, _ := strings.Cut(dsn, "://")
	var b strings.Builder
	b.WriteString(scheme + "://")
	// pgx (as libpq) takes the user info to end at the first '@' before
	// any '/'.
	if i := strings.IndexAny(rest, "@/"); i >= 0 && rest[i] == '@' {
		user, _, pw := strings.Cut(rest[:i], ":")
		had = pw
		if user != "" {
			b.WriteString(user + "@")
		}
		rest = rest[i+1:]
	}
	hostPath, query, hasQuery := strings.Cut(rest, "?")
	if strings.Contains(hostPath, "@") {
		return "", false, false
	}
	b.WriteString(hostPath)
	if hasQuery {
		var kept []string
		for _, param := range strings.Split(query, "&") {
			k, _, _ := strings.Cut(param, "=")
			if dk, err := url.QueryUnescape(k); err == nil {
				k = dk
			}
			if secretKey(k) {
				had = true
				continue
			}
			kept = append(kept, param)
		}
		if len(kept) > 0 {
			b.WriteString("?" + strings.Join(kept, "&"))
		}
	}
	if !had {
		return dsn, false, true
	}
	return b.String(), true, true
}

// Redact returns dsn without its passwords, as Describe shows it, for
// messages about a ledger that may not have been opened.
func Redact(dsn string) string { return redactDSN(dsn) }

// redactDSN returns dsn without its passwords, for messages and Describe.
func redactDSN(dsn string) string {
	if clean, _, ok := WithoutPassword(dsn); ok {
		return clean
	}
	if pgdsn.IsURL(dsn) {
		scheme, _, _ := strings.Cut(dsn, "://")
		return scheme + "://(unparsable)"
	}
	return "(unparsable connection string)"
}

// dsnSetting returns the value dsn gives key (a URL's query parameter, or
// a keyword), and whether it gives one.
func dsnSetting(dsn, key string) (string, bool) {
	if pgdsn.IsURL(dsn) {
		u, err := url.Parse(dsn)
		if err != nil || !u.Query().Has(key) {
			return "", false
		}
		return u.Query().Get(key), true
	}
	pairs, _ := parseKeywordValue(dsn)
	val, found := "", false
	for _, p := range pairs {
		if p.key == key {
			val, found = p.val, true // the last one counts, as in libpq
		}
	}
	return val, found
}

// badURLChars reports whether the user info of a URL dsn holds a
// character that must be percent-encoded there ('@', '/', '?', '#', or a
// '%' that starts no escape): the usual reason a URL with a password does
// not parse, or names a host that is part of the password.
func badURLChars(dsn string) bool {
	if !pgdsn.IsURL(dsn) {
		return false
	}
	_, rest, _ := strings.Cut(dsn, "://")
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return false
	}
	info := rest[:at]
	if !strings.Contains(info, ":") {
		return false
	}
	if strings.ContainsAny(info, "@/?#[]") {
		return true
	}
	_, err := url.PathUnescape(info)
	return err != nil
}

// encodeHint is the hint for a URL whose user info needs percent-encoding.
const encodeHint = "percent-encode special characters in the password (@ as %40, / as %2F, ? as %3F, # as %23, % as %25), or give the password in PGPASSWORD or a PGPASSFILE"

// parseConfig parses dsn as pgx does, with idem's account of what is
// wrong, and without a password from a password file libpq would ignore
// (ignored names it).
func parseConfig(dsn, desc string) (cfg *pgxpool.Config, ignored string, err error) {
	if _, _, ok := WithoutPassword(dsn); !ok && pgdsn.IsURL(dsn) {
		return nil, "", &ledger.StoreError{Op: "open", Path: desc,
			Err:  fmt.Errorf("invalid PostgreSQL DSN: an '@' after the host (an unencoded character in the password?)"),
			Hint: encodeHint}
	}
	cfg, err = pgxpool.ParseConfig(dsn)
	if err != nil {
		se := &ledger.StoreError{Op: "open", Path: desc, Err: parseError(err),
			Hint: "write the ledger as postgres://USER@HOST:PORT/DATABASE (see 'idem --help')"}
		switch {
		case strings.Contains(err.Error(), "failed to configure TLS"):
			se.Hint = "check sslmode, sslrootcert, sslcert and sslkey in the DSN (or PGSSLMODE, PGSSLROOTCERT, PGSSLCERT, PGSSLKEY)"
		case !pgdsn.IsURL(dsn):
			se.Hint = "write the ledger as host=HOST port=PORT dbname=DATABASE user=USER with libpq's keywords and values (see 'idem --help')"
		case badURLChars(dsn):
			se.Hint = encodeHint
		}
		return nil, "", se
	}
	if path := insecurePassfile(dsn); path != "" {
		cfg.ConnConfig.Password = ""
		ignored = path
	}
	return cfg, ignored, nil
}

// insecurePassfile returns the password file libpq would read for dsn
// and ignore because its group or others may use it (libpq wants 0600 or
// less), or "". A password in the DSN, PGPASSWORD or a service file means
// no password file is read.
func insecurePassfile(dsn string) string {
	if _, had, _ := WithoutPassword(dsn); had || os.Getenv("PGPASSWORD") != "" || os.Getenv("PGSERVICE") != "" {
		return ""
	}
	if _, ok := dsnSetting(dsn, "service"); ok {
		return ""
	}
	path, ok := dsnSetting(dsn, "passfile")
	if !ok {
		path = os.Getenv("PGPASSFILE")
	}
	if path == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return ""
		}
		path = filepath.Join(home, ".pgpass")
	}
	fi, err := os.Stat(path)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o077 == 0 {
		return ""
	}
	return path
}

// passfileWarning says why a password file is ignored.
func passfileWarning(path string) string {
	return fmt.Sprintf("password file %s is ignored, as libpq ignores it: its group or others may use it (chmod 0600 %s)", path, path)
}

// parseError keeps the reason a DSN was refused without quoting the DSN:
// pgx's own message quotes it (its redaction is best effort) and a URL
// error quotes it whole, password included. The reasons TLS settings fail
// (a file that cannot be read, an invalid sslmode) name no secret and are
// kept.
func parseError(err error) error {
	reason := ""
	var pe *pgconn.ParseConfigError
	if errors.As(err, &pe) {
		msg := pe.Error()
		if i := strings.LastIndex(msg, "`: "); i >= 0 {
			reason = msg[i+3:]
		}
		if inner := errors.Unwrap(pe); inner != nil {
			reason = strings.TrimSuffix(reason, " ("+inner.Error()+")")
			if reason == "failed to configure TLS" {
				reason += ": " + inner.Error()
			}
		}
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		reason = strings.TrimPrefix(reason+": ", ": ") + ue.Err.Error()
	}
	if reason == "" {
		return errors.New("invalid PostgreSQL DSN")
	}
	return fmt.Errorf("invalid PostgreSQL DSN: %s", reason)
}

// Warnings says what the caller should tell the user about how the ledger
// was opened: a password file that was ignored.
func (p *Ledger) Warnings() []string {
	if p.passfile == "" {
		return nil
	}
	return []string{passfileWarning(p.passfile)}
}

// getParam and setParam read and set a run-time parameter whatever the
// case the DSN spelt it in (DateStyle, datestyle): the server would get
// both spellings otherwise.
func getParam(params map[string]string, name string) (string, bool) {
	for k, v := range params {
		if strings.EqualFold(k, name) {
			return v, true
		}
	}
	return "", false
}

func setParam(params map[string]string, name, value string) {
	delParam(params, name)
	params[name] = value
}

func delParam(params map[string]string, name string) {
	for k := range params {
		if strings.EqualFold(k, name) {
			delete(params, k)
		}
	}
}

// dsnSets reports whether the DSN names the parameter.
func dsnSets(dsn, param string) bool {
	_, ok := dsnSetting(dsn, param)
	return ok
}

func hostAddr(c *pgconn.Config) string {
	if strings.HasPrefix(c.Host, "/") {
		return fmt.Sprintf("%s/.s.PGSQL.%d", c.Host, c.Port)
	}
	return net.JoinHostPort(c.Host, strconv.Itoa(int(c.Port)))
}
