package backoff

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// fixedRand always returns the same value, so jittered delays are exact.
type fixedRand float64

func (f fixedRand) Float64() float64 { return float64(f) }

// almostOne is the largest float64 below 1, the top of Float64's range.
var almostOne = math.Nextafter(1, 0)

var _ Rand = (*rand.Rand)(nil)

func TestDefault(t *testing.T) {
	p := Default()
	if err := p.Validate(); err != nil {
		t.Fatalf("Default().Validate()=%v, want nil", err)
	}
	want := Policy{Initial: 500 * time.Millisecond, Multiplier: 2, Max: 30 * time.Second, Jitter: 0.2}
	if p != want {
		t.Fatalf("Default()=%+v, want %+v", p, want)
	}
}

func TestDelayDeterministic(t *testing.T) {
	noJitter := Default()
	noJitter.Jitter = 0
	tests := []struct {
		name string
		p    Policy
		n    int
		want time.Duration
	}{
		{"first retry", noJitter, 1, 500 * time.Millisecond},
		{"second retry doubles", noJitter, 2, time.Second},
		{"third retry", noJitter, 3, 2 * time.Second},
		{"sixth retry", noJitter, 6, 16 * time.Second},
		{"seventh retry hits cap", noJitter, 7, 30 * time.Second},
		{"far past cap", noJitter, 1000, 30 * time.Second},
		{"huge n", noJitter, math.MaxInt, 30 * time.Second},
		{"zero n is first", noJitter, 0, 500 * time.Millisecond},
		{"negative n is first", noJitter, -5, 500 * time.Millisecond},
		{"min int n is first", noJitter, math.MinInt, 500 * time.Millisecond},
		{"multiplier one is constant", Policy{Initial: time.Second, Multiplier: 1, Max: time.Minute}, 50, time.Second},
		{"fractional multiplier", Policy{Initial: time.Second, Multiplier: 1.5, Max: time.Minute}, 3, 2250 * time.Millisecond},
		{"initial above max: cap wins", Policy{Initial: time.Hour, Multiplier: 2, Max: time.Second}, 1, time.Second},
		{"zero initial", Policy{Initial: 0, Multiplier: 2, Max: time.Second}, 5, 0},
		{"zero max", Policy{Initial: time.Second, Multiplier: 2, Max: 0}, 5, 0},
		{"zero policy", Policy{}, 3, 0},
		{"huge multiplier", Policy{Initial: time.Nanosecond, Multiplier: math.MaxFloat64, Max: time.Hour}, 3, time.Hour},
		{"infinite multiplier", Policy{Initial: time.Nanosecond, Multiplier: math.Inf(1), Max: time.Hour}, 2, time.Hour},
		{"infinite multiplier first attempt", Policy{Initial: time.Nanosecond, Multiplier: math.Inf(1), Max: time.Hour}, 1, time.Nanosecond},
		{"nan multiplier acts as one", Policy{Initial: time.Second, Multiplier: math.NaN(), Max: time.Hour}, 9, time.Second},
		{"multiplier below one acts as one", Policy{Initial: time.Second, Multiplier: 0.5, Max: time.Hour}, 9, time.Second},
		{"negative initial", Policy{Initial: -time.Second, Multiplier: 2, Max: time.Hour}, 3, 0},
		{"negative max", Policy{Initial: time.Second, Multiplier: 2, Max: -time.Hour}, 3, 0},
		{"max duration cap", Policy{Initial: time.Second, Multiplier: 10, Max: math.MaxInt64}, 100, math.MaxInt64},
		{"just under max duration", Policy{Initial: math.MaxInt64 - 1, Multiplier: 1, Max: math.MaxInt64}, 1, math.MaxInt64},
		{"max duration initial and cap", Policy{Initial: math.MaxInt64, Multiplier: 2, Max: math.MaxInt64}, 1, math.MaxInt64},
		{"negative jitter is deterministic", Policy{Initial: time.Second, Multiplier: 2, Max: time.Hour, Jitter: -1}, 2, 2 * time.Second},
		{"nan jitter is deterministic", Policy{Initial: time.Second, Multiplier: 2, Max: time.Hour, Jitter: math.NaN()}, 2, 2 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// r is nil: with no jitter it must not be consulted.
			if got := tt.p.Delay(tt.n, nil); got != tt.want {
				t.Fatalf("%+v.Delay(%d, nil)=%v, want %v", tt.p, tt.n, got, tt.want)
			}
		})
	}
}

func TestDelayJitter(t *testing.T) {
	p := Policy{Initial: time.Second, Multiplier: 2, Max: 10 * time.Second, Jitter: 0.2}
	tests := []struct {
		name string
		p    Policy
		n    int
		r    Rand
		want time.Duration
	}{
		{"rand 0 gives the top", p, 1, fixedRand(0), time.Second},
		{"rand 0.5 gives the middle", p, 1, fixedRand(0.5), 900 * time.Millisecond},
		{"rand near 1 gives the bottom", p, 1, fixedRand(almostOne), 800 * time.Millisecond},
		{"jitter applies after the cap", p, 10, fixedRand(0.5), 9 * time.Second},
		{"capped rand 0 is exactly max", p, 10, fixedRand(0), 10 * time.Second},
		{"full jitter near 1 approaches zero", Policy{Initial: time.Second, Multiplier: 2, Max: time.Hour, Jitter: 1}, 1, fixedRand(almostOne), 0},
		{"full jitter middle", Policy{Initial: time.Second, Multiplier: 2, Max: time.Hour, Jitter: 1}, 2, fixedRand(0.5), time.Second},
		{"jitter above one clamps to one", Policy{Initial: time.Second, Multiplier: 2, Max: time.Hour, Jitter: 7}, 1, fixedRand(0.5), 500 * time.Millisecond},
		{"nil rand gives the top", p, 2, nil, 2 * time.Second},
		{"rand above range clamps to 1", p, 1, fixedRand(3), 800 * time.Millisecond},
		{"rand below range clamps to 0", p, 1, fixedRand(-3), time.Second},
		{"rand nan counts as 0", p, 1, fixedRand(math.NaN()), time.Second},
		{"max duration with jitter", Policy{Initial: math.MaxInt64, Multiplier: 2, Max: math.MaxInt64, Jitter: 0.5}, 3, fixedRand(0), math.MaxInt64},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.p.Delay(tt.n, tt.r); got != tt.want {
				t.Fatalf("%+v.Delay(%d, %v)=%v, want %v", tt.p, tt.n, tt.r, got, tt.want)
			}
		})
	}
}

func TestDelayMonotonicWithoutJitter(t *testing.T) {
	p := Default()
	p.Jitter = 0
	prev := time.Duration(0)
	for n := 1; n <= 200; n++ {
		d := p.Delay(n, nil)
		if d < prev {
			t.Fatalf("Delay(%d)=%v < Delay(%d)=%v", n, d, n-1, prev)
		}
		prev = d
	}
}

func TestDelayWithMathRand(t *testing.T) {
	p := Default()
	r := rand.New(rand.NewPCG(1, 2))
	for n := 1; n <= 50; n++ {
		d := p.Delay(n, r)
		top := p.Initial << min(n-1, 20)
		top = min(top, p.Max)
		if lo := time.Duration(float64(top) * 0.8); d < lo || d > top {
			t.Fatalf("Delay(%d)=%v, want within [%v, %v]", n, d, lo, top)
		}
	}
}

func TestValidate(t *testing.T) {
	ok := Default()
	with := func(f func(*Policy)) Policy {
		p := ok
		f(&p)
		return p
	}
	tests := []struct {
		name    string
		p       Policy
		wantErr string // substring; "" means valid
	}{
		{"default", ok, ""},
		{"zero delays", with(func(p *Policy) { p.Initial, p.Max = 0, 0 }), ""},
		{"initial above max", with(func(p *Policy) { p.Initial, p.Max = time.Hour, time.Second }), ""},
		{"multiplier one", with(func(p *Policy) { p.Multiplier = 1 }), ""},
		{"jitter zero", with(func(p *Policy) { p.Jitter = 0 }), ""},
		{"jitter one", with(func(p *Policy) { p.Jitter = 1 }), ""},
		{"negative initial", with(func(p *Policy) { p.Initial = -1 }), "--initial-delay must not be negative"},
		{"negative max", with(func(p *Policy) { p.Max = -time.Second }), "--max-delay must not be negative"},
		{"multiplier below one", with(func(p *Policy) { p.Multiplier = 0.5 }), "--multiplier must be a finite number >= 1"},
		{"multiplier zero", with(func(p *Policy) { p.Multiplier = 0 }), "--multiplier must be"},
		{"multiplier nan", with(func(p *Policy) { p.Multiplier = math.NaN() }), "--multiplier must be"},
		{"multiplier inf", with(func(p *Policy) { p.Multiplier = math.Inf(1) }), "--multiplier must be"},
		{"jitter negative", with(func(p *Policy) { p.Jitter = -0.1 }), "--jitter must be between 0 and 1"},
		{"jitter above one", with(func(p *Policy) { p.Jitter = 1.01 }), "--jitter must be between 0 and 1"},
		{"jitter nan", with(func(p *Policy) { p.Jitter = math.NaN() }), "--jitter must be"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.p.Validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("%+v.Validate()=%v, want nil", tt.p, err)
			case tt.wantErr != "" && err == nil:
				t.Fatalf("%+v.Validate()=nil, want error containing %q", tt.p, tt.wantErr)
			case tt.wantErr != "" && !strings.Contains(err.Error(), tt.wantErr):
				t.Fatalf("%+v.Validate()=%q, want it to contain %q", tt.p, err, tt.wantErr)
			}
		})
	}
}

func FuzzDelay(f *testing.F) {
	f.Add(int64(500*time.Millisecond), 2.0, int64(30*time.Second), 0.2, 1, 0.5)
	f.Add(int64(time.Hour), 2.0, int64(time.Second), 0.0, 3, 0.0)
	f.Add(int64(1), 1e308, int64(math.MaxInt64), 1.0, math.MaxInt, 0.999)
	f.Add(int64(math.MaxInt64), 1.0, int64(math.MaxInt64), 0.5, 0, 0.1)
	f.Fuzz(func(t *testing.T, initial int64, mult float64, maxDelay int64, jitter float64, n int, u float64) {
		p := Policy{Initial: time.Duration(initial), Multiplier: mult, Max: time.Duration(maxDelay), Jitter: jitter}
		if u < 0 || !(u < 1) {
			u = 0 // Rand's contract: [0, 1)
		}
		got := p.Delay(n, fixedRand(u))
		if got < 0 || got > max(p.Max, 0) {
			t.Fatalf("%+v.Delay(%d, %v)=%v, want within [0, %v]", p, n, u, got, p.Max)
		}
		if p.Validate() != nil {
			return
		}
		// Lower bound (1−J)×min(Initial×M^(n−1), Max), less float rounding.
		top := float64(min(p.Initial, p.Max))
		if n > 1 {
			top = min(float64(p.Initial)*math.Pow(mult, float64(n-1)), float64(p.Max))
		}
		lo := (1 - jitter) * top
		if float64(got) < lo*(1-1e-12)-1 {
			t.Fatalf("%+v.Delay(%d, %v)=%v, want >= %v", p, n, u, got, time.Duration(lo))
		}
		if jitter == 0 && got != p.Delay(n, nil) {
			t.Fatalf("%+v.Delay(%d) depends on the random source without jitter", p, n)
		}
	})
}

func BenchmarkDelay(b *testing.B) {
	p := Default()
	r := rand.New(rand.NewPCG(1, 2))
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		n++
		_ = p.Delay(n%40+1, r)
	}
}
