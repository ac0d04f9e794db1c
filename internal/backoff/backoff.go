// Package backoff computes the wait between attempts of a retried command.
//
// It is a pure function of a Policy, the attempt number and an injected
// random source, so callers can test retry schedules without sleeping and
// without global random state. Waiting itself is the caller's business.
package backoff

import (
	"fmt"
	"math"
	"time"
)

// Rand is the random source; *math/rand/v2.Rand satisfies it.
// Float64 must return a value in [0, 1); values outside are clamped.
type Rand interface{ Float64() float64 }

// Policy describes exponential backoff with a cap and proportional jitter.
// A zero field means zero, not "default": start from Default and override.
type Policy struct {
	Initial    time.Duration // delay before the 2nd attempt (default 500ms)
	Multiplier float64       // growth per attempt (default 2)
	Max        time.Duration // cap on any delay, applied before jitter (default 30s)
	Jitter     float64       // 0..1, fraction of the delay that is randomised (default 0.2); 0 = deterministic
}

// Default returns the policy behind idem's flag defaults:
// --initial-delay 500ms, --multiplier 2, --max-delay 30s, --jitter 0.2.
func Default() Policy {
	return Policy{
		Initial:    500 * time.Millisecond,
		Multiplier: 2,
		Max:        30 * time.Second,
		Jitter:     0.2,
	}
}

// Validate reports the first field that is out of range. The error names the
// flag that sets the field (e.g. "--multiplier must be ..."), so it can be
// shown to the user as a usage error unchanged. Initial > Max is allowed:
// the cap wins.
func (p Policy) Validate() error {
	switch {
	case p.Initial < 0:
		return fmt.Errorf("--initial-delay must not be negative, got %v", p.Initial)
	case !(p.Multiplier >= 1) || math.IsInf(p.Multiplier, 0):
		return fmt.Errorf("--multiplier must be a finite number >= 1, got %v", p.Multiplier)
	case p.Max < 0:
		return fmt.Errorf("--max-delay must not be negative, got %v", p.Max)
	case !(p.Jitter >= 0 && p.Jitter <= 1):
		return fmt.Errorf("--jitter must be between 0 and 1, got %v", p.Jitter)
	}
	return nil
}

// Delay returns the wait after attempt n (n >= 1) failed, before attempt n+1:
// d = min(Initial × Multiplier^(n−1), Max), then uniform in [d×(1−Jitter), d]
// using r. n < 1 is treated as 1.
//
// r is consulted only when Jitter > 0; a nil r then yields d itself.
// Delay never panics, overflows or returns a value outside [0, Max], even for
// a policy that fails Validate: out-of-range fields are clamped (negative
// durations to 0, a Multiplier below 1 or NaN to 1, Jitter into [0, 1]).
func (p Policy) Delay(n int, r Rand) time.Duration {
	if p.Max <= 0 || p.Initial <= 0 {
		return 0
	}
	d := p.capped(n)
	j := p.Jitter
	if !(j > 0) || r == nil {
		return p.toDuration(d)
	}
	u := r.Float64()
	if !(u > 0) { // also catches NaN
		u = 0
	}
	u = min(j, 1) * min(u, 1)
	return p.toDuration(d * (1 - u))
}

// capped returns min(Initial × Multiplier^(n−1), Max) in nanoseconds,
// assuming Initial > 0 and Max > 0. The result is finite and not NaN.
func (p Policy) capped(n int) float64 {
	limit := float64(p.Max)
	d := float64(p.Initial)
	m := p.Multiplier
	if n > 1 && m > 1 { // m > 1 is false for NaN
		// Pow overflows to +Inf rather than wrapping, and Inf compares
		// greater than any cap; d > 0 keeps Inf×d from becoming NaN.
		d *= math.Pow(m, float64(n-1))
	}
	return min(d, limit)
}

// toDuration converts ns (0 <= ns <= float64(Max)) to a Duration no greater
// than Max. float64(Max) may have rounded up past Max, and converting a float
// at or beyond 2^63 to int64 is implementation-defined, so values that reach
// the cap return Max exactly.
func (p Policy) toDuration(ns float64) time.Duration {
	if ns >= float64(p.Max) {
		return p.Max
	}
	if !(ns > 0) {
		return 0
	}
	return time.Duration(ns)
}
