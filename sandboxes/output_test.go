package sandboxes

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/guest"
	"github.com/agentsandbox/agentsandbox/record"
)

// fakeSession is a command's connection to the agent that sends the
// given output, in chunks as the agent does, then its exit; like the real
// one, it waits while its reader does not read.
type fakeSession struct {
	events chan guest.SessionEvent
	closed chan struct{}
	once   sync.Once
	sent   [2]atomic.Int64 // bytes handed to the reader so far
}

func (f *fakeSession) Events() <-chan guest.SessionEvent { return f.events }
func (f *fakeSession) WriteStdin([]byte) error           { return nil }
func (f *fakeSession) Resize(guest.PTYSize) error        { return nil }
func (f *fakeSession) CloseStdin() error                 { return nil }
func (f *fakeSession) Signal(string) error               { return nil }
func (f *fakeSession) Close() error {
	f.once.Do(func() { close(f.closed) })
	return nil
}

// startFake starts an exec whose command writes out and errb (interleaved
// in 64 KiB chunks), keeping limit bytes of each on disk.
func startFake(t *testing.T, limit int64, foreground bool, out, errb []byte) (*execState, *fakeSession, *record.Store) {
	t.Helper()
	store, err := record.OpenStore(filepath.Join(t.TempDir(), "state"))
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeSession{events: make(chan guest.SessionEvent, 16), closed: make(chan struct{})}
	x := newExecState("xtest", limit, store, foreground)
	x.x, x.started = f, time.Now()
	go func() {
		defer close(f.events)
		send := func(ev guest.SessionEvent) bool {
			select {
			case f.events <- ev:
				return true
			case <-f.closed:
				return false
			}
		}
		bufs := [2][]byte{out, errb}
		for len(bufs[0])+len(bufs[1]) > 0 {
			for i, typ := range []string{guest.EventStdout, guest.EventStderr} {
				n := min(len(bufs[i]), guest.MaxSessionChunk)
				if n == 0 {
					continue
				}
				if !send(guest.SessionEvent{Type: typ, Data: bufs[i][:n]}) {
					return
				}
				f.sent[i].Add(int64(n))
				bufs[i] = bufs[i][n:]
			}
		}
		send(guest.SessionEvent{Type: guest.EventExit, ExitCode: 3})
	}()
	go x.pump()
	return x, f, store
}

func randomBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// got is what a reader received of both streams: the bytes at their
// offsets, and the gaps.
type got struct {
	data [2][]byte
	gaps [2][][2]int64
	next [2]int64
	exit *ExitStatus
	err  string
}

func streamIndex(name string) int {
	if name == EventStderr {
		return stderr
	}
	return stdout
}

// check fails unless the events are contiguous: each output or gap event
// starts where the last of its stream ended.
func (g *got) emit(t *testing.T, from [2]int64) func(ExecEvent) error {
	g.next = from
	return func(ev ExecEvent) error {
		switch ev.Type {
		case EventStdout, EventStderr:
			i := streamIndex(ev.Type)
			b := []byte(ev.Text)
			if ev.Base64 != nil {
				b = ev.Base64
			}
			if ev.Offset != g.next[i] {
				t.Errorf("%s event at offset %d, want %d (the end of the last one)", ev.Type, ev.Offset, g.next[i])
			}
			g.data[i] = append(g.data[i], b...)
			g.next[i] = ev.Offset + int64(len(b))
		case EventGap:
			i := streamIndex(ev.Stream)
			if ev.Offset != g.next[i] || ev.Next <= ev.Offset {
				t.Errorf("gap [%d, %d) of %s, want one from %d", ev.Offset, ev.Next, ev.Stream, g.next[i])
			}
			g.gaps[i] = append(g.gaps[i], [2]int64{ev.Offset, ev.Next})
			g.next[i] = ev.Next
		case EventExit:
			g.exit = ev.Exit
		case EventError:
			g.err = ev.Error
		}
		return nil
	}
}

func TestRing(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var rg ring
	var all []byte
	for range 300 {
		p := randomBytes(r.Uint64(), r.IntN(100<<10))
		rg.write(p)
		all = append(all, p...)
		if rg.end != int64(len(all)) {
			t.Fatalf("end %d, want %d", rg.end, len(all))
		}
		if want := max(0, int64(len(all))-OutputWindow); rg.start != want {
			t.Fatalf("start %d, want %d", rg.start, want)
		}
		if len(rg.buf) > OutputWindow {
			t.Fatalf("the ring holds %d bytes, over its bound %d", len(rg.buf), OutputWindow)
		}
		off := rg.start + r.Int64N(rg.end-rg.start+1)
		b := make([]byte, r.IntN(OutputWindow+10))
		n := rg.read(b, off)
		if want := min(int64(len(b)), rg.end-off); int64(n) != want || !bytes.Equal(b[:n], all[off:off+int64(n)]) {
			t.Fatalf("read %d bytes at %d: %d bytes, or not the ones written", len(b), off, n)
		}
	}
	rg.write(randomBytes(9, 3*OutputWindow)) // more than it holds at once
	if rg.end-rg.start != OutputWindow {
		t.Errorf("after a write of 3 windows: holds [%d, %d)", rg.start, rg.end)
	}
	rg.free()
	if rg.buf != nil || rg.start != rg.end {
		t.Errorf("free: %d bytes held, [%d, %d)", len(rg.buf), rg.start, rg.end)
	}
}

// TestStreamAppendIsLinear: taking 64 MiB of output in the agent's 64 KiB
// chunks allocates about the ring once, not a copy of the window per
// chunk (the old stream cloned 4 MiB for every chunk: 4 GiB here).
func TestStreamAppendIsLinear(t *testing.T) {
	x := newExecState("xlin", 0, nil, false)
	chunk := randomBytes(3, guest.MaxSessionChunk)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range (64 << 20) / len(chunk) {
		x.add(stdout, chunk)
	}
	runtime.ReadMemStats(&after)
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 4*OutputWindow {
		t.Errorf("64 MiB of output allocated %d bytes, want at most %d", alloc, 4*OutputWindow)
	}
	if x.streams[stdout].total() != 64<<20 {
		t.Errorf("total %d", x.streams[stdout].total())
	}
}

// TestForegroundReaderGetsEveryByte: a foreground reader slower than its
// command gets every byte, in order, with no gap: past what is on disk
// the command is held until the reader has read.
func TestForegroundReaderGetsEveryByte(t *testing.T) {
	const limit = 512 << 10
	out, errb := randomBytes(4, 6<<20+123), randomBytes(5, 1<<20+7)
	x, f, _ := startFake(t, limit, true, out, errb)
	var g got
	emit := g.emit(t, [2]int64{})
	var maxAhead int64
	slow := func(ev ExecEvent) error {
		if err := emit(ev); err != nil {
			return err
		}
		// The command runs ahead of the reader by at most what is on disk,
		// the window, what the reader took and has not sent yet (a batch)
		// and what is in flight (the channel, a chunk).
		if ahead := f.sent[stdout].Load() - max(g.next[stdout], limit); ahead > maxAhead {
			maxAhead = ahead
		}
		time.Sleep(200 * time.Microsecond)
		return nil
	}
	if err := x.events(context.Background(), 0, 0, true, true, slow); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(g.data[stdout], out) || !bytes.Equal(g.data[stderr], errb) {
		t.Errorf("the reader got %d of %d stdout bytes and %d of %d stderr bytes, or not the same ones", len(g.data[stdout]), len(out), len(g.data[stderr]), len(errb))
	}
	if len(g.gaps[stdout])+len(g.gaps[stderr]) != 0 {
		t.Errorf("a foreground reader got gaps: %v", g.gaps)
	}
	if g.exit == nil || g.exit.ExitCode != 3 {
		t.Errorf("exit %+v", g.exit)
	}
	if bound := int64(OutputWindow + readBatch + 18*guest.MaxSessionChunk); maxAhead > bound {
		t.Errorf("the command ran %d bytes ahead of its reader past the disk copy, want at most %d: no backpressure", maxAhead, bound)
	}
}

// TestSlowFollowerGetsGap: a reader of a background exec that falls
// behind past the disk copy and the window gets explicit gaps, and every
// byte it does get is the one at its offset.
func TestSlowFollowerGetsGap(t *testing.T) {
	const limit = 256 << 10
	out := randomBytes(6, 8<<20)
	x, _, _ := startFake(t, limit, false, out, nil)
	var g got
	emit := g.emit(t, [2]int64{})
	first := true
	err := x.events(context.Background(), 0, 0, true, false, func(ev ExecEvent) error {
		if first { // fall behind: let the command write it all
			first = false
			<-x.done
		}
		return emit(ev)
	})
	if err != nil {
		t.Fatal(err)
	}
	var covered int64
	pos := int64(0)
	for _, gp := range g.gaps[stdout] {
		covered += gp[1] - gp[0]
		pos = gp[1]
	}
	if len(g.gaps[stdout]) == 0 || covered+int64(len(g.data[stdout])) != int64(len(out)) || g.next[stdout] != int64(len(out)) {
		t.Fatalf("got %d bytes and gaps %v of %d", len(g.data[stdout]), g.gaps[stdout], len(out))
	}
	if pos < limit || !bytes.Equal(g.data[stdout][:limit], out[:limit]) {
		t.Errorf("the first %d bytes (on disk) did not all come: gaps %v", limit, g.gaps)
	}
	if tail := g.data[stdout][len(g.data[stdout])-OutputWindow:]; !bytes.Equal(tail, out[len(out)-OutputWindow:]) {
		t.Error("the last window's bytes are not the command's last bytes")
	}
}

// TestOutputAfterEnd: once the exec has ended and its output is stored,
// its memory is released, a reader gets the first limit bytes from the
// stored blob (the one the record names) and a gap for the rest.
func TestOutputAfterEnd(t *testing.T) {
	const limit = 300 << 10
	out, errb := randomBytes(7, 2<<20), randomBytes(8, 1000)
	x, _, store := startFake(t, limit, false, out, errb)
	<-x.done
	x.storeOutput()
	x.release()
	for i, s := range x.streams {
		if s.ring.buf != nil {
			t.Errorf("%s: %d bytes still held after the release", s.name, len(s.ring.buf))
		}
		if s.blob == nil {
			t.Fatalf("%s: no blob", s.name)
		}
		want := [][]byte{out[:limit], errb}[i]
		r, err := store.OpenBlob(*s.blob)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(r)
		r.Close()
		if err != nil || !bytes.Equal(b, want) {
			t.Errorf("%s blob: %d bytes (%v), want the first %d", s.name, len(b), err, len(want))
		}
	}
	if tmp, _ := filepath.Glob(filepath.Join(store.Dir(), "blobs", ".tmp-*")); len(tmp) != 0 {
		t.Errorf("spool files left: %v", tmp)
	}
	var g got
	if err := x.events(context.Background(), 100, 0, false, false, g.emit(t, [2]int64{100, 0})); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(g.data[stdout], out[100:limit]) || !bytes.Equal(g.data[stderr], errb) {
		t.Errorf("after the end: %d stdout bytes, %d stderr bytes", len(g.data[stdout]), len(g.data[stderr]))
	}
	if want := [][2]int64{{limit, int64(len(out))}}; fmt.Sprint(g.gaps[stdout]) != fmt.Sprint(want) {
		t.Errorf("gaps %v, want %v", g.gaps[stdout], want)
	}
	if g.exit == nil {
		t.Error("no exit event after the output of an ended exec")
	}
	// An offset at the end gives the exit alone.
	var h got
	x.events(context.Background(), int64(len(out)), int64(len(errb)), true, false, h.emit(t, [2]int64{int64(len(out)), int64(len(errb))}))
	if h.exit == nil || len(h.data[stdout])+len(h.gaps[stdout]) != 0 {
		t.Errorf("from the end: %+v", h)
	}
}

// TestOutputNoFollow: without follow a reader of a running exec gets what
// is there and no exit; an offset past the end waits for its bytes.
func TestOutputNoFollow(t *testing.T) {
	store, err := record.OpenStore(filepath.Join(t.TempDir(), "state"))
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeSession{events: make(chan guest.SessionEvent), closed: make(chan struct{})}
	x := newExecState("xnf", 1<<20, store, false)
	x.x = f
	go x.pump()
	f.events <- guest.SessionEvent{Type: guest.EventStdout, Data: []byte("hello ")}
	f.events <- guest.SessionEvent{Type: guest.EventStdout, Data: []byte("world")} // the pump has taken "hello " once this is sent
	waitFor(t, func() bool { x.mu.Lock(); defer x.mu.Unlock(); return x.streams[stdout].total() == 11 })
	var g got
	if err := x.events(context.Background(), 0, 0, false, false, g.emit(t, [2]int64{})); err != nil {
		t.Fatal(err)
	}
	if string(g.data[stdout]) != "hello world" || g.exit != nil {
		t.Errorf("no follow, running: %q, exit %v", g.data[stdout], g.exit)
	}
	var h got
	done := make(chan error)
	go func() { done <- x.events(context.Background(), 20, 0, true, false, h.emit(t, [2]int64{20, 0})) }()
	f.events <- guest.SessionEvent{Type: guest.EventStdout, Data: []byte(" and the rest of it")}
	f.events <- guest.SessionEvent{Type: guest.EventExit}
	close(f.events)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if string(h.data[stdout]) != "rest of it" || h.exit == nil {
		t.Errorf("from offset 20: %q, exit %v", h.data[stdout], h.exit)
	}
}

// TestKillUnpins: a foreground reader that stops reading holds its
// command, but not a kill of the sandbox.
func TestKillUnpins(t *testing.T) {
	x, _, _ := startFake(t, 64<<10, true, randomBytes(9, 8<<20), nil)
	stuck := make(chan struct{})
	go x.events(context.Background(), 0, 0, true, true, func(ExecEvent) error { <-stuck; return nil })
	defer close(stuck)
	time.Sleep(100 * time.Millisecond)
	if !x.running() {
		t.Fatal("the command ran to its end past a reader that does not read")
	}
	x.kill()
	select {
	case <-x.done:
	case <-time.After(10 * time.Second):
		t.Fatal("kill did not end the command held by its reader")
	}
}

// TestTextStaysText: a cut between events falls between characters, so
// that UTF-8 output is sent as text however it was chunked.
func TestTextStaysText(t *testing.T) {
	x := newExecState("xt", 0, nil, false)
	text := bytes.Repeat([]byte("€"), 100<<10) // 3 bytes each
	for _, ev := range x.pieceEvents(piece{stream: stdout, data: text}) {
		if ev.Base64 != nil {
			t.Fatalf("an event at %d is base64: the cut split a character", ev.Offset)
		}
	}
	evs := x.pieceEvents(piece{stream: stdout, data: []byte{0xff, 'a'}})
	if len(evs) != 1 || evs[0].Base64 == nil {
		t.Errorf("bytes that are not UTF-8: %+v", evs)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(time.Millisecond)
	}
}

// BenchmarkExecOutput is the server's cost per MiB of a command's output
// from the agent's events to the reader's events: disk copy, ring,
// events (not their JSON).
func BenchmarkExecOutput(b *testing.B) {
	chunk := bytes.Repeat([]byte("0123456789abcdef"), guest.MaxSessionChunk/16)
	const size = 64 << 20
	b.SetBytes(size)
	for b.Loop() {
		store, err := record.OpenStore(filepath.Join(b.TempDir(), "state"))
		if err != nil {
			b.Fatal(err)
		}
		f := &fakeSession{events: make(chan guest.SessionEvent, 16), closed: make(chan struct{})}
		x := newExecState("xb", DefaultLogLimit, store, true)
		x.x = f
		go func() {
			for range size / len(chunk) {
				f.events <- guest.SessionEvent{Type: guest.EventStdout, Data: chunk}
			}
			f.events <- guest.SessionEvent{Type: guest.EventExit}
			close(f.events)
		}()
		go x.pump()
		n := 0
		x.events(context.Background(), 0, 0, true, true, func(ev ExecEvent) error {
			n += len(ev.Text)
			return nil
		})
		if n != size {
			b.Fatalf("%d bytes", n)
		}
		x.storeOutput()
		x.release()
		os.RemoveAll(store.Dir())
	}
}
