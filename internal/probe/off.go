//go:build !testhooks && !phases

package probe

// At marks a point; see the package documentation.
func At(point string) {}

// Exit is called once, just before idem exits.
func Exit() {}
