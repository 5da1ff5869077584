package s3store_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"path"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/agentsandbox/agentsandbox/internal/remotetest"
	"github.com/agentsandbox/agentsandbox/internal/s3test"
	"github.com/agentsandbox/agentsandbox/record"
	"github.com/agentsandbox/agentsandbox/s3store"
)

var buckets atomic.Int64

func open(t testing.TB, srv *s3test.Server, getenv func(string) string) *s3store.Bucket {
	t.Helper()
	name := srv.Bucket(t, fmt.Sprintf("bucket-%d", buckets.Add(1)))
	cfg, err := s3store.ParseURL(srv.URL(name, "team/a"), getenv)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s3store.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestBucketConformance runs the Remote suite against versitygw.
func TestBucketConformance(t *testing.T) {
	srv := s3test.Start(t)
	remotetest.Run(t, func(t *testing.T) remotetest.Backend {
		b := open(t, srv, s3test.Env)
		return remotetest.Backend{Remote: b, Overwrite: func(t *testing.T, key string, data []byte) {
			// The server's root writes without conditions or checksum.
			_, err := srv.Client(t).PutObject(context.Background(), strings.SplitN(strings.TrimPrefix(b.String(), "s3://"), "/", 2)[0],
				"team/a/"+key, bytes.NewReader(data), int64(len(data)), minio.PutObjectOptions{DisableContentSha256: true})
			if err != nil {
				t.Fatal(err)
			}
		}}
	})
}

// TestObjectsAreStoredPlain: an object is stored as sent (no
// aws-chunked encoding), under PREFIX/KEY.
func TestObjectsAreStoredPlain(t *testing.T) {
	srv := s3test.Start(t)
	b := open(t, srv, s3test.Env)
	data := []byte("plain bytes")
	key := record.BlobKey(record.DigestOf(data))
	if _, err := b.Put(context.Background(), key, bytes.NewReader(data), int64(len(data)), record.DigestOf(data)); err != nil {
		t.Fatal(err)
	}
	bucket := strings.SplitN(strings.TrimPrefix(b.String(), "s3://"), "/", 2)[0]
	info, err := srv.Client(t).StatObject(context.Background(), bucket, "team/a/"+key, minio.StatObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if info.Size != int64(len(data)) || info.Metadata.Get("Content-Encoding") != "" {
		t.Fatalf("stored object: size %d, Content-Encoding %q; want %d bytes, no encoding", info.Size, info.Metadata.Get("Content-Encoding"), len(data))
	}
}

// TestTornUpload: the server is killed while a push is sending a large
// blob. The push fails, the bucket holds no record (so none names a
// missing blob), and after a restart the same push completes.
func TestTornUpload(t *testing.T) {
	srv := s3test.Start(t)
	b := open(t, srv, s3test.Env)
	a := remotetest.OpenStore(t)
	// Few large blobs, so the kill lands mid-upload.
	id := remotetest.MakeRecord(t, a, 4, 48<<20)
	done := make(chan error, 1)
	go func() {
		_, err := record.Push(context.Background(), a, b, id)
		done <- err
	}()
	// Kill once the first bytes of a blob have reached the server's
	// directory (versitygw writes an upload into a temp file first).
	deadline := time.Now().Add(60 * time.Second)
	for !srv.Receiving() {
		if time.Now().After(deadline) {
			t.Fatal("the server never started receiving")
		}
		time.Sleep(2 * time.Millisecond)
	}
	srv.Kill()
	err := <-done
	if err == nil {
		t.Fatal("a push to a server killed mid-upload succeeded")
	}
	t.Logf("push cut short: %v", err)
	if !strings.Contains(err.Error(), "cannot reach") {
		t.Errorf("the error does not say the store could not be reached: %v", err)
	}
	srv.Restart()
	if ok, err := b.Has(context.Background(), record.RecordKey(id)); err != nil || ok {
		t.Fatalf("after a torn push the bucket has the record: %v, %v", ok, err)
	}
	// Whatever blobs did arrive are whole (the server verified them).
	keys, err := b.List(context.Background(), "blobs/")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		rc, err := b.Get(context.Background(), k)
		if err != nil {
			t.Fatal(err)
		}
		h := sha256.New()
		_, err = io.Copy(h, rc)
		rc.Close()
		if err != nil || hex.EncodeToString(h.Sum(nil)) != path.Base(k) {
			t.Fatalf("blob %s left by the torn push is not whole (%v)", k, err)
		}
	}
	c := remotetest.OpenStore(t)
	t.Logf("%d of 8 blobs arrived before the kill", len(keys))
	if _, err := record.Push(context.Background(), a, b, id); err != nil {
		t.Fatalf("push after restart: %v", err)
	}
	if _, err := record.Pull(context.Background(), c, b, id); err != nil {
		t.Fatal(err)
	}
	remotetest.Verified(t, c, id)
}

// TestBadCredentials: refused credentials are named as such.
func TestBadCredentials(t *testing.T) {
	srv := s3test.Start(t)
	bad := func(name string) string {
		if name == "AWS_SECRET_ACCESS_KEY" {
			return "wrong"
		}
		return s3test.Env(name)
	}
	b := open(t, srv, bad)
	for _, f := range []func() error{
		func() error { return b.Check(context.Background()) },
		func() error { _, err := b.Has(context.Background(), "blobs/00/00"); return err },
		func() error {
			_, err := b.Put(context.Background(), "blobs/00/00", strings.NewReader("x"), 1, record.DigestOf([]byte("x")))
			return err
		},
	} {
		err := f()
		if err == nil || !strings.Contains(err.Error(), "check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY") {
			t.Fatalf("with a wrong secret: %v; want it to say which variables to check", err)
		}
	}
}

// TestUnreachable: an endpoint nobody listens on fails fast and says what
// to check; nothing local is touched.
func TestUnreachable(t *testing.T) {
	srv := s3test.Start(t)
	b := open(t, srv, s3test.Env)
	a := remotetest.OpenStore(t)
	id := remotetest.MakeRecord(t, a, 2, 10)
	srv.Kill()
	start := time.Now()
	_, err := record.Push(context.Background(), a, b, id)
	if err == nil || !strings.Contains(err.Error(), "cannot reach "+srv.Endpoint) || !strings.Contains(err.Error(), "check the endpoint") {
		t.Fatalf("push to a dead endpoint: %v", err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("push to a dead endpoint took %s to fail", d)
	}
	remotetest.Verified(t, a, id)
	if err := b.Check(context.Background()); err == nil || !strings.Contains(err.Error(), "cannot reach") {
		t.Fatalf("Check of a dead endpoint: %v", err)
	}
}

// TestMissingBucket names the bucket.
func TestMissingBucket(t *testing.T) {
	srv := s3test.Start(t)
	cfg, err := s3store.ParseURL(srv.URL("nosuchbucket", ""), s3test.Env)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s3store.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Check(context.Background()); err == nil || !strings.Contains(err.Error(), `bucket "nosuchbucket" does not exist`) {
		t.Fatalf("Check of a missing bucket: %v", err)
	}
}
