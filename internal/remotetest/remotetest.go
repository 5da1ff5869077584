// Package remotetest is the conformance suite every record.Remote passes
// (record.DirRemote, s3store.Bucket), and the records it pushes: a record
// with a given number of outputs, each a NAR blob, made in a real Store.
package remotetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/record"
)

// Backend is what the suite is given for each test.
type Backend struct {
	// Remote is an empty store.
	Remote record.Remote
	// Overwrite replaces the object at key with data behind the remote's
	// back (as damage or an attacker would).
	Overwrite func(t *testing.T, key string, data []byte)
}

// Run runs the suite; open returns a new, empty backend each time.
func Run(t *testing.T, open func(t *testing.T) Backend) {
	t.Run("PutIsIdempotent", func(t *testing.T) { testPutIdempotent(t, open(t)) })
	t.Run("PutRefusesWrongDigest", func(t *testing.T) { testPutWrongDigest(t, open(t)) })
	t.Run("GetMissing", func(t *testing.T) { testGetMissing(t, open(t)) })
	t.Run("List", func(t *testing.T) { testList(t, open(t)) })
	t.Run("SwapRef", func(t *testing.T) { testSwapRef(t, open(t)) })
	t.Run("ConcurrentPushOfOneRecord", func(t *testing.T) { testConcurrentPush(t, open(t)) })
	t.Run("PushPullRoundTrip", func(t *testing.T) { testRoundTrip(t, open(t)) })
	t.Run("TamperedObjectsCaughtOnPull", func(t *testing.T) { testTampered(t, open(t)) })
	t.Run("PushRefPullRef", func(t *testing.T) { testRefs(t, open(t)) })
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}

func put(t *testing.T, rm record.Remote, key string, data []byte) bool {
	t.Helper()
	stored, err := rm.Put(ctx(t), key, bytes.NewReader(data), int64(len(data)), record.DigestOf(data))
	if err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
	return stored
}

func get(t *testing.T, rm record.Remote, key string) []byte {
	t.Helper()
	rc, err := rm.Get(ctx(t), key)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("read %s: %v", key, err)
	}
	return b
}

func testPutIdempotent(t *testing.T, b Backend) {
	data := []byte("hello blob")
	key := record.BlobKey(record.DigestOf(data))
	if ok, err := b.Remote.Has(ctx(t), key); err != nil || ok {
		t.Fatalf("Has before Put = %v, %v; want false", ok, err)
	}
	if !put(t, b.Remote, key, data) {
		t.Fatal("first Put: stored = false")
	}
	if put(t, b.Remote, key, data) {
		t.Fatal("second Put of the same key: stored = true; want false (If-None-Match: *)")
	}
	if ok, err := b.Remote.Has(ctx(t), key); err != nil || !ok {
		t.Fatalf("Has after Put = %v, %v; want true", ok, err)
	}
	if got := get(t, b.Remote, key); !bytes.Equal(got, data) {
		t.Fatalf("Get = %q, want %q", got, data)
	}
	// A write under an existing name never replaces it, whatever it sends.
	other := []byte("other content")
	if stored, err := b.Remote.Put(ctx(t), key, bytes.NewReader(other), int64(len(other)), record.DigestOf(other)); err != nil || stored {
		t.Fatalf("Put of other bytes under a stored key = %v, %v; want false, nil", stored, err)
	}
	if got := get(t, b.Remote, key); !bytes.Equal(got, data) {
		t.Fatalf("after a second Put, Get = %q, want the first %q", got, data)
	}
}

func testPutWrongDigest(t *testing.T, b Backend) {
	data := []byte("the bytes sent")
	key := record.BlobKey(record.DigestOf([]byte("the bytes announced")))
	_, err := b.Remote.Put(ctx(t), key, bytes.NewReader(data), int64(len(data)), record.DigestOf([]byte("the bytes announced")))
	if err == nil {
		t.Fatal("Put with a sha256 that does not match the bytes succeeded")
	}
	if ok, _ := b.Remote.Has(ctx(t), key); ok {
		t.Fatalf("a refused Put left %s", key)
	}
}

func testGetMissing(t *testing.T, b Backend) {
	_, err := b.Remote.Get(ctx(t), record.BlobKey(record.DigestOf([]byte("never stored"))))
	if !errors.Is(err, record.ErrRemoteMissing) {
		t.Fatalf("Get of a missing key: %v; want ErrRemoteMissing", err)
	}
}

func testList(t *testing.T, b Backend) {
	for _, k := range []string{"records/abc.json", "records/abd.json", "records/b.json", "blobs/ab/x"} {
		put(t, b.Remote, k, []byte(k))
	}
	got, err := b.Remote.List(ctx(t), "records/ab")
	if err != nil {
		t.Fatal(err)
	}
	if want := "records/abc.json records/abd.json"; strings.Join(got, " ") != want {
		t.Fatalf("List(records/ab) = %q, want %q", got, want)
	}
}

func testSwapRef(t *testing.T, b Backend) {
	rm, key := b.Remote, "refs/git/abc"
	if v, ver, err := rm.GetRef(ctx(t), key); err != nil || v != nil || ver != "" {
		t.Fatalf("GetRef of a new ref = %q, %q, %v", v, ver, err)
	}
	v1, err := rm.SwapRef(ctx(t), key, []byte("one\n"), "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rm.SwapRef(ctx(t), key, []byte("again\n"), ""); !errors.Is(err, record.ErrRefChanged) {
		t.Fatalf("creating an existing ref: %v; want ErrRefChanged", err)
	}
	val, ver, err := rm.GetRef(ctx(t), key)
	if err != nil || string(val) != "one\n" || ver == "" {
		t.Fatalf("GetRef = %q, %q, %v", val, ver, err)
	}
	// Two writers read the same version; one wins, the other is told.
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = rm.SwapRef(ctx(t), key, fmt.Appendf(nil, "writer %d\n", i), ver)
		}()
	}
	wg.Wait()
	won := 0
	for _, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, record.ErrRefChanged):
			t.Fatalf("a losing swap: %v; want ErrRefChanged", err)
		}
	}
	if won != 1 {
		t.Fatalf("%d of %d concurrent swaps from version %s won; want exactly 1 (compare-and-swap)", won, len(errs), v1)
	}
	if _, err := rm.SwapRef(ctx(t), key, []byte("stale\n"), ver); !errors.Is(err, record.ErrRefChanged) {
		t.Fatalf("a swap from a stale version: %v; want ErrRefChanged", err)
	}
}

// OpenStore opens a new local store in a temp directory.
func OpenStore(t testing.TB) *record.Store {
	t.Helper()
	s, err := record.OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// MakeRecord stores in s a record of one step with n outputs, each a
// directory holding one file of size bytes (distinct content, stored as
// its NAR), with its logs, job spec and workflow file: n+4 blobs.
func MakeRecord(t testing.TB, s *record.Store, n, size int) record.ID {
	t.Helper()
	putBlob := func(b []byte) record.Digest {
		d, _, err := s.PutBlob(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	dir := t.TempDir()
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	st := record.Step{
		Name: "produce", Isolation: "namespace",
		JobDigest: putBlob([]byte(`{"step":"produce"}`)),
		Started:   t0, Finished: t0.Add(time.Second), Status: record.StatusSucceeded,
		Logs: record.Logs{Stdout: putBlob([]byte("made outputs\n")), Stderr: putBlob(nil)},
	}
	content := make([]byte, size)
	for i := range n {
		p := filepath.Join(dir, fmt.Sprintf("out%03d", i))
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		for j := range content {
			content[j] = byte(i*31 + j*7 + j>>8)
		}
		copy(content, fmt.Sprintf("output %d of %d\n", i, n))
		if err := os.WriteFile(filepath.Join(p, "data"), content, 0o644); err != nil {
			t.Fatal(err)
		}
		h, sz, err := s.PutNAR(p)
		if err != nil {
			t.Fatal(err)
		}
		st.Outputs = append(st.Outputs, record.Output{Path: fmt.Sprintf("out%03d", i), NarHash: h, NarSize: sz})
	}
	r := &record.Record{
		Version: record.Version, ToolVersion: "0.1.0-test",
		Workflow: record.Workflow{Name: "remote-test", FileDigest: putBlob([]byte("name: remote-test\n")), CanonicalHash: record.DigestOf([]byte("canon"))},
		Host:     record.Host{Kernel: "6.1.0", Arch: "amd64"},
		Started:  t0, Finished: t0.Add(2 * time.Second), Status: record.StatusSucceeded,
		Steps: []record.Step{st},
	}
	id, err := s.Put(r)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// Verified checks that s holds id and every blob it names, intact.
func Verified(t testing.TB, s *record.Store, id record.ID) {
	t.Helper()
	probs, err := s.Verify(id)
	if err != nil {
		t.Fatalf("verify %s: %v", id, err)
	}
	if len(probs) != 0 {
		t.Fatalf("verify %s: %v", id, probs)
	}
}

func testRoundTrip(t *testing.T, b Backend) {
	a, bb := OpenStore(t), OpenStore(t)
	id := MakeRecord(t, a, 5, 3000)
	tr, err := record.Push(ctx(t), a, b.Remote, id)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Blobs != 9 || tr.Sent != 9 || !tr.Record {
		t.Fatalf("first push = %+v; want 9 blobs sent and the record", tr)
	}
	tr, err = record.Push(ctx(t), a, b.Remote, id)
	if err != nil || tr.Sent != 0 || tr.Record || !tr.Already {
		t.Fatalf("second push = %+v, %v; want nothing sent", tr, err)
	}
	got, err := record.ResolveRemote(ctx(t), b.Remote, id.String()[:6])
	if err != nil || got != id {
		t.Fatalf("ResolveRemote(prefix) = %s, %v; want %s", got, err, id)
	}
	tr, err = record.Pull(ctx(t), bb, b.Remote, id)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Sent != 9 || !tr.Record {
		t.Fatalf("pull = %+v; want 9 blobs and the record", tr)
	}
	Verified(t, bb, id)
	if tr, err := record.Pull(ctx(t), bb, b.Remote, id); err != nil || !tr.Already {
		t.Fatalf("second pull = %+v, %v; want already there", tr, err)
	}
}

func testConcurrentPush(t *testing.T, b Backend) {
	// Two nodes made the same record (same blobs): both push at once.
	a, c := OpenStore(t), OpenStore(t)
	id := MakeRecord(t, a, 20, 5000)
	if id2 := MakeRecord(t, c, 20, 5000); id2 != id {
		t.Fatalf("the same record made twice has two ids: %s, %s", id, id2)
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	sent := make([]int, 2)
	for i, s := range []*record.Store{a, c} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tr, err := record.Push(ctx(t), s, b.Remote, id)
			errs[i], sent[i] = err, tr.Sent
		}()
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("concurrent pushes: %v; %v", errs[0], errs[1])
	}
	if total := sent[0] + sent[1]; total != 24 {
		t.Fatalf("the two pushes stored %d + %d blobs; want 24 in all (each blob stored once)", sent[0], sent[1])
	}
	d := OpenStore(t)
	if _, err := record.Pull(ctx(t), d, b.Remote, id); err != nil {
		t.Fatal(err)
	}
	Verified(t, d, id)
}

func testTampered(t *testing.T, b Backend) {
	a := OpenStore(t)
	id := MakeRecord(t, a, 2, 100)
	if _, err := record.Push(ctx(t), a, b.Remote, id); err != nil {
		t.Fatal(err)
	}
	r, err := a.Get(id)
	if err != nil {
		t.Fatal(err)
	}
	// A blob changed in the bucket: the pull refuses it and stores no record.
	blob := r.Steps[0].Outputs[1].NarHash.Blob()
	b.Overwrite(t, record.BlobKey(blob), []byte("not the output"))
	c := OpenStore(t)
	_, err = record.Pull(ctx(t), c, b.Remote, id)
	if !errors.Is(err, record.ErrHashMismatch) {
		t.Fatalf("pull with a changed blob: %v; want ErrHashMismatch", err)
	}
	if !strings.Contains(err.Error(), record.BlobKey(blob)) {
		t.Fatalf("the error does not name the object: %v", err)
	}
	if _, err := c.GetRaw(id); !errors.Is(err, record.ErrNotFound) {
		t.Fatalf("a refused pull left the record: %v", err)
	}
	if c.HasBlob(blob) {
		t.Fatal("a refused pull kept the changed blob")
	}
	// The record itself changed: refused.
	raw, _ := a.GetRaw(id)
	b.Overwrite(t, record.RecordKey(id), bytes.Replace(raw, []byte(`"succeeded"`), []byte(`"failed"`), 1))
	if _, err := record.Pull(ctx(t), c, b.Remote, id); !errors.Is(err, record.ErrHashMismatch) {
		t.Fatalf("pull of a changed record: %v; want ErrHashMismatch", err)
	}
}

func testRefs(t *testing.T, b Backend) {
	a, c := OpenStore(t), OpenStore(t)
	d, _, err := a.PutBlob(strings.NewReader("tree of commit abc"))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.PutRef("git", "abc", d); err != nil {
		t.Fatal(err)
	}
	if err := record.PushRef(ctx(t), a, b.Remote, "git", "abc"); err != nil {
		t.Fatal(err)
	}
	got, ok, err := record.PullRef(ctx(t), c, b.Remote, "git", "abc")
	if err != nil || !ok || got != d {
		t.Fatalf("PullRef = %s, %v, %v; want %s", got, ok, err, d)
	}
	if err := c.VerifyBlob(d); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := record.PullRef(ctx(t), c, b.Remote, "git", "none"); err != nil || ok {
		t.Fatalf("PullRef of a missing ref = %v, %v", ok, err)
	}
}
