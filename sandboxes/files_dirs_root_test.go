package sandboxes

import (
	"context"
	"errors"
	"io/fs"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/record"
)

// TestMakeDirMoveWatch: directories made and entries moved beneath a
// namespace sandbox's workspace, seen by the job as its own; a watch
// that sees what the job does; a symlink the job plants never followed;
// record entries for the changes.
func TestMakeDirMoveWatch(t *testing.T) {
	m, store := newManager(t, Options{})
	info, err := m.Create(context.Background(), Spec{Resources: map[string]any{"timeout": "1m"}})
	if err != nil {
		t.Fatal(err)
	}
	testDirsMoveWatch(t, m, store, info.ID)
}

func testDirsMoveWatch(t *testing.T, m Manager, store *record.Store, id string) {
	ctx := context.Background()
	fi, err := m.MakeDir(ctx, id, "a/b", 0)
	if err != nil || fi.Type != "dir" || fi.Mode != "0755" || fi.Owner != "user" || fi.Group != "user" {
		t.Fatalf("mkdir a/b: %+v %v", fi, err)
	}
	if _, err := m.MakeDir(ctx, id, "a/b", 0); !errors.Is(err, fs.ErrExist) || CodeOf(err) != CodeConflict {
		t.Errorf("mkdir of a directory that exists: %v", err)
	}
	out, _, _ := collect(t, m, id, ExecRequest{Shell: "stat -c '%u %a' a/b; echo x > a/f; ln -s / root; ln -s /etc etc; mkdir w"})
	if strings.TrimSpace(out) != "65534 755" {
		t.Errorf("the job sees a/b as %q", out)
	}
	fi, err = m.Move(ctx, id, "a/f", "c/d/f")
	if err != nil || fi.Path != "c/d/f" || fi.Type != "file" {
		t.Fatalf("move: %+v %v", fi, err)
	}
	if out, _, _ := collect(t, m, id, ExecRequest{Shell: "cat c/d/f; test -e a/f || echo gone"}); out != "x\ngone\n" {
		t.Errorf("the job after the move: %q", out)
	}
	if _, err := m.Move(ctx, id, "c", "c/d/e"); CodeOf(err) != CodeBadRequest {
		t.Errorf("move into itself: %v", err)
	}
	if _, err := m.Move(ctx, id, "c/d/f", "a/b"); !errors.Is(err, fs.ErrExist) {
		t.Errorf("move over a directory: %v", err)
	}
	fi, err = m.Stat(ctx, id, "etc")
	if err != nil || fi.Type != "symlink" || fi.SymlinkTarget != "/etc" {
		t.Errorf("stat of a symlink: %+v %v", fi, err)
	}
	// The job's symlinks out: never followed by any of the three.
	if _, err := m.MakeDir(ctx, id, "root/tmp/escape", 0); CodeOf(err) != CodeBadRequest {
		t.Errorf("mkdir through a symlink: %v", err)
	}
	if _, err := m.Move(ctx, id, "c/d/f", "root/tmp/f"); CodeOf(err) != CodeBadRequest {
		t.Errorf("move through a symlink: %v", err)
	}
	if _, err := m.Move(ctx, id, "etc/passwd", "p"); CodeOf(err) != CodeBadRequest {
		t.Errorf("move out of a symlinked directory: %v", err)
	}
	for _, p := range []string{"root", "etc", "root/etc", "../..", "/etc"} {
		err := m.WatchDir(ctx, id, p, true, func() {}, func(FileEvent) error { return nil })
		if CodeOf(err) != CodeBadRequest {
			t.Errorf("watch %s: %v", p, err)
		}
	}
	// A symlink moved is the link itself.
	if fi, err := m.Move(ctx, id, "etc", "etc2"); err != nil || fi.Type != "symlink" || fi.SymlinkTarget != "/etc" {
		t.Errorf("move of a symlink: %+v %v", fi, err)
	}

	// The watch sees the job's changes.
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	ready := make(chan struct{})
	evs := make(chan FileEvent, 100)
	done := make(chan error, 1)
	go func() {
		done <- m.WatchDir(wctx, id, "w", true, func() { close(ready) }, func(ev FileEvent) error {
			evs <- ev
			return nil
		})
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("watch: %v", err)
	}
	var got []string
	wait := func(want ...string) {
		t.Helper()
		for len(want) > 0 {
			select {
			case ev := <-evs:
				s := ev.Type + " " + ev.Path
				got = append(got, s)
				if s == want[0] {
					want = want[1:]
				}
			case <-wctx.Done():
				t.Fatalf("waiting for %q; got %q", want, got)
			}
		}
	}
	// w/sub's own watch is in place once its create is reported.
	collect(t, m, id, ExecRequest{Shell: "mkdir w/sub"})
	wait("create w/sub")
	collect(t, m, id, ExecRequest{Shell: "echo hi > w/sub/f && chmod 600 w/sub/f && mv w/sub/f w/g && rm w/g"})
	wait("create w/sub/f", "write w/sub/f", "chmod w/sub/f", "rename w/sub/f", "create w/g", "remove w/g")
	cancel()
	if err := <-done; err != nil {
		t.Errorf("watch ended: %v", err)
	}

	killed, err := m.Kill(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	rid, err := store.Resolve(killed.Record)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := store.Get(rid)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	var mv record.Entry
	for _, e := range rec.Sandbox.Entries {
		if e.Kind == "file_mkdir" || e.Kind == "file_move" {
			kinds = append(kinds, e.Kind+" "+e.Summary)
			mv = e
		}
	}
	if !slices.Equal(kinds, []string{"file_mkdir mkdir a/b", "file_move move a/f to c/d/f", "file_move move etc to etc2"}) {
		t.Errorf("record entries: %q", kinds)
	}
	if a, err := store.Action(mv.Digest); err != nil || a.Path != "etc" || a.Destination != "etc2" {
		t.Errorf("the move's action: %+v %v", a, err)
	}
}

// TestVMMakeDirMoveWatch is the same in a VM sandbox (vm tier), whose
// workspace is the host directory its 9p share serves: the host's watch
// sees the guest's changes.
func TestVMMakeDirMoveWatch(t *testing.T) {
	m, store, _ := newVMManager(t)
	info, err := m.Create(context.Background(), Spec{Template: "vm.yaml#box"})
	if err != nil {
		t.Fatal(err)
	}
	testDirsMoveWatch(t, m, store, info.ID)
}
