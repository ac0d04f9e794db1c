package sqlite

import (
	"testing"
	"time"
)

func TestNextBatch(t *testing.T) {
	for _, tc := range []struct {
		name         string
		batch, limit int
		held         time.Duration
		want         int
	}{
		{"slow halves", 500, 5000, 3 * targetHold, 250},
		{"slow stops at one", 1, 5000, time.Minute, 1},
		{"fast doubles", 500, 5000, targetHold / 10, 1000},
		{"fast stops at the limit", 4000, 5000, 0, 5000},
		{"about right stays", 800, 5000, targetHold / 2, 800},
		{"limit below the batch", 500, 100, 0, 100},
	} {
		if got := nextBatch(tc.batch, tc.limit, tc.held); got != tc.want {
			t.Errorf("%s: nextBatch(%d, %d, %v) = %d, want %d", tc.name, tc.batch, tc.limit, tc.held, got, tc.want)
		}
	}
}
