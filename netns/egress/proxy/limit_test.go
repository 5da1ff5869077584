package proxy

import (
	"context"
	"testing"
	"time"
)

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

func TestBucket(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	b := newBucket(100_000, clk.now) // 100 KB/s, burst 12.5 KB
	if b.chunk() != 12500 {
		t.Fatalf("chunk %d", b.chunk())
	}
	if d := b.reserve(12500); d != 0 {
		t.Errorf("the first burst waits %s", d)
	}
	if d := b.reserve(10000); d != 100*time.Millisecond {
		t.Errorf("10 KB past the burst waits %s, want 100ms", d)
	}
	clk.t = clk.t.Add(100 * time.Millisecond) // paid for
	if d := b.reserve(5000); d != 50*time.Millisecond {
		t.Errorf("wait %s, want 50ms", d)
	}
	clk.t = clk.t.Add(time.Hour) // idle: the saving is capped at the burst
	if d := b.reserve(12500); d != 0 {
		t.Errorf("wait %s after idling", d)
	}
	if d := b.reserve(1); d <= 0 {
		t.Errorf("no wait past the burst after idling")
	}
	// 200 KB at 100 KB/s, in chunks, takes the time the rate says.
	clk.t = clk.t.Add(time.Hour)
	var total time.Duration
	for sent := 0; sent < 200_000; sent += b.chunk() {
		d := b.reserve(b.chunk())
		clk.t = clk.t.Add(d)
		total += d
	}
	if want := 1875 * time.Millisecond; total != want { // (200 - 12.5) KB / 100 KB/s
		t.Errorf("200 KB took %s, want %s", total, want)
	}
	// A clock going backwards grants nothing.
	clk.t = clk.t.Add(-time.Second)
	if d := b.reserve(1000); d <= 0 {
		t.Errorf("backwards clock granted tokens")
	}
}

func TestBucketWaitCancelled(t *testing.T) {
	b := newBucket(1000, time.Now)
	b.reserve(b.chunk())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	if err := b.wait(ctx, b.chunk()); err == nil || time.Since(start) > time.Second {
		t.Errorf("wait on a cancelled context: %v after %s", err, time.Since(start))
	}
}
