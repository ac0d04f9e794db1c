package sqlite

// growStack grows the calling goroutine's stack to 32 KiB in one step,
// while the stack is still shallow. SQLite's transpiled code needs more
// stack than the main goroutine has after package init (16 KiB); left to
// itself, the runtime grows the stack in the middle of SQLite's first
// statement, and growing a stack copies it, walking every frame on it,
// SQLite's deep ones included, whose tables are then read for the first
// time. Copying the opener's few frames instead takes about 0.3 ms off a
// run or a replay here (bench/RESULTS.md). The frame is read at one index
// only, which keeps the compiler from dropping it.
//
//go:noinline
func growStack(i int) byte {
	var frame [16 << 10]byte
	return frame[i%len(frame)]
}
