//go:build !linux || idem_nosplice

package runner

import "io"

// spliceOut is Linux's splice(2) elsewhere: not handled, so the tee goes
// on with plain reads and writes through its buffer.
func spliceOut(r io.Reader, w io.Writer) (n int64, handled bool, err error) {
	return 0, false, nil
}

// growPipe leaves the pipe as it is: only Linux can resize one.
func growPipe(r io.Reader) {}
