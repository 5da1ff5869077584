package sandboxes

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestExecMemoryReleased: 40 commands of 4 MiB of output each leave the
// manager's heap where it was (the old stream kept a 4 MiB window and the
// record's head of each for as long as the sandbox lived: 320 MiB here);
// a sandbox keeps its last maxEndedExecs ended execs; a killed sandbox
// is replaced by its Info alone, which goes after KeepStopped.
func TestExecMemoryReleased(t *testing.T) {
	m, _ := newManager(t, Options{KeepStopped: 2 * time.Second, ReapEvery: 50 * time.Millisecond})
	ctx := context.Background()
	info, err := m.Create(ctx, Spec{Resources: map[string]any{"timeout": "5m"}})
	if err != nil {
		t.Fatal(err)
	}
	id := info.ID
	run := func(r ExecRequest) ExecInfo {
		t.Helper()
		x, err := m.Exec(ctx, id, r, func(ExecEvent) error { return nil })
		if err != nil || x.Exit == nil || x.Exit.ExitCode != 0 {
			t.Fatalf("exec %q: %+v %v", r.Shell, x, err)
		}
		return x
	}
	run(ExecRequest{Shell: "yes | head -c 4194304"}) // the first warms buffers up
	before := heapInUse()
	for range 40 {
		if x := run(ExecRequest{Shell: "yes | head -c 4194304"}); x.StdoutBytes != 4<<20 {
			t.Fatalf("%d bytes", x.StdoutBytes)
		}
	}
	after := heapInUse()
	if grew := int64(after) - int64(before); grew > 16<<20 {
		t.Errorf("40 execs of 4 MiB grew the heap by %d MiB (from %d to %d MiB), want it flat", grew>>20, before>>20, after>>20)
	}
	b, err := m.(*manager).box(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	b.mu.Lock()
	for _, x := range b.execs {
		x.mu.Lock()
		for _, s := range x.streams {
			if s.ring.buf != nil {
				t.Errorf("exec %s: its %s still holds %d bytes after its end", x.id, s.name, len(s.ring.buf))
			}
		}
		x.mu.Unlock()
	}
	b.mu.Unlock()

	// A background exec's output stays readable after its end (from its
	// blob), as long as the exec is one of the last kept.
	bg, err := m.Exec(ctx, id, ExecRequest{Shell: "echo background", Background: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range maxEndedExecs + 5 {
		run(ExecRequest{Shell: fmt.Sprintf("echo %d", i)})
	}
	b.mu.Lock()
	n := len(b.execs)
	b.mu.Unlock()
	if n > maxEndedExecs {
		t.Errorf("the sandbox keeps %d ended execs, want at most %d", n, maxEndedExecs)
	}
	if _, err := m.GetExec(ctx, id, bg.ID); CodeOf(err) != CodeNotFound || !strings.Contains(err.Error(), "record") {
		t.Errorf("an exec older than the last %d: %v, want not_found naming the record", maxEndedExecs, err)
	}

	killed, err := m.Kill(ctx, id)
	if err != nil || killed.State != StateStopped || killed.Record == "" {
		t.Fatalf("kill: %+v %v", killed, err)
	}
	m.(*manager).mu.Lock()
	kept := m.(*manager).boxes[id]
	m.(*manager).mu.Unlock()
	if kept == b || kept.sb != nil || len(kept.execs) != 0 || kept.entries != nil || kept.stoppedAt.IsZero() {
		t.Errorf("the killed sandbox is still held: engine sandbox %v, %d execs, %d entries", kept.sb != nil, len(kept.execs), len(kept.entries))
	}
	if got, err := m.Get(ctx, id); err != nil || got.State != StateStopped || got.Record != killed.Record || got.Ended != "killed" {
		t.Errorf("get after kill: %+v %v", got, err)
	}
	if again, err := m.Kill(ctx, id); err != nil || again.Record != killed.Record {
		t.Errorf("a second kill: %+v %v", again, err)
	}
	if _, err := m.Exec(ctx, id, ExecRequest{Argv: []string{"true"}}, nil); CodeOf(err) != CodeConflict {
		t.Errorf("exec after kill: %v, want conflict", err)
	}
	if err := m.Output(ctx, id, bg.ID, 0, 0, false, func(ExecEvent) error { return nil }); CodeOf(err) != CodeNotFound || !strings.Contains(err.Error(), killed.Record) {
		t.Errorf("output after kill: %v, want not_found naming the record", err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := m.Get(ctx, id)
		if CodeOf(err) == CodeNotFound {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stopped sandbox is still shown after its KeepStopped: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
