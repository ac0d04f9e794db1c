//go:build !darwin

package sqlite

// platformPragmas is empty: fsync(2) reaches stable storage here.
const platformPragmas = ""
