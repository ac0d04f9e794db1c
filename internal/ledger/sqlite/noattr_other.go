//go:build !linux

package sqlite

import "golang.org/x/sys/unix"

// errNoAttr is getxattr's answer for a file without the attribute.
const errNoAttr = unix.ENOATTR
