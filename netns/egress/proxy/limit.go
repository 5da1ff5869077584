package proxy

import (
	"context"
	"sync"
	"time"
)

// bucket is a token bucket of bytes: rate tokens a second, at most burst
// saved up. Takers reserve what they are about to send and wait until the
// bucket has paid for it, so concurrent connections share the rate.
type bucket struct {
	mu     sync.Mutex
	rate   float64 // bytes per second
	burst  float64
	tokens float64
	last   time.Time
	now    func() time.Time
}

// minBurst keeps the bucket from cutting writes into tiny pieces at low
// rates.
const minBurst = 4096

func newBucket(rate int64, now func() time.Time) *bucket {
	burst := float64(rate) / 8 // an eighth of a second's worth
	if burst < minBurst {
		burst = minBurst
	}
	t := now()
	return &bucket{rate: float64(rate), burst: burst, tokens: burst, last: t, now: now}
}

// chunk is the most one take may ask for.
func (b *bucket) chunk() int { return int(b.burst) }

// reserve takes n tokens (n <= chunk) and returns how long the caller
// must wait before sending them.
func (b *bucket) reserve(n int) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	t := b.now()
	if el := t.Sub(b.last); el > 0 {
		b.tokens += el.Seconds() * b.rate
		if b.tokens > b.burst {
			b.tokens = b.burst
		}
		b.last = t
	}
	b.tokens -= float64(n)
	if b.tokens >= 0 {
		return 0
	}
	return time.Duration(-b.tokens / b.rate * float64(time.Second))
}

// wait reserves n tokens and sleeps until they are paid for, or ctx ends.
func (b *bucket) wait(ctx context.Context, n int) error {
	d := b.reserve(n)
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
