//go:build !testhooks

package runner

// testOnlyCrash marks a crash point for the reliability suite. In idem as
// built for use it does nothing and costs nothing; see testhooks_on.go.
func testOnlyCrash(point string) {}
