package sqlite

// platformPragmas turns on fullfsync on macOS, where fsync(2) hands the
// data to the drive but does not make the drive flush its cache: SQLite
// then syncs with F_FULLFSYNC, and a synchronous=FULL commit (an outcome,
// the token mark) survives a power cut as it does on Linux. Its cost was
// not measured (no Mac to measure on).
const platformPragmas = "&_pragma=fullfsync(1)"
