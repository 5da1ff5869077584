package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/minio/minio-go/v7"

	"github.com/agentsandbox/agentsandbox/internal/remotetest"
	"github.com/agentsandbox/agentsandbox/internal/s3test"
	"github.com/agentsandbox/agentsandbox/record"
)

// sharedBucket starts versitygw with one bucket, sets the credentials, and
// returns the server and the store URL.
func sharedBucket(t *testing.T) (*s3test.Server, string) {
	t.Helper()
	srv := s3test.Start(t)
	srv.Bucket(t, "records")
	t.Setenv("AWS_ACCESS_KEY_ID", s3test.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", s3test.SecretKey)
	t.Setenv(storeEnv, "")
	return srv, srv.URL("records", "ci")
}

// TestRecordsOnAnotherNode: records made in state directory A and pushed
// are shown, verified, diffed and exported in state directory B, which has
// only the bucket (each pulled on demand, verified).
func TestRecordsOnAnotherNode(t *testing.T) {
	_, url := sharedBucket(t)
	stateA, stateB := t.TempDir(), t.TempDir()
	a, err := record.OpenStore(stateA)
	if err != nil {
		t.Fatal(err)
	}
	id1 := remotetest.MakeRecord(t, a, 3, 1000).String()
	id2 := remotetest.MakeRecord(t, a, 4, 1000).String()
	for _, id := range []string{id1, id2[:10]} {
		code, out, stderr := execute(t, "records", "push", "--state-dir", stateA, "--store", url, id)
		if code != ExitOK || !strings.Contains(stderr, "pushed record ") {
			t.Fatalf("records push %s: exit %d\n%s\n%s", id, code, out, stderr)
		}
	}
	code, _, stderr := execute(t, "records", "push", "--state-dir", stateA, "--store", url, id1)
	if code != ExitOK || !strings.Contains(stderr, "is in "+url+" already") {
		t.Fatalf("second push: exit %d\n%s", code, stderr)
	}

	// B: the store from $AGENTSANDBOX_STORE, the ids abbreviated.
	t.Setenv(storeEnv, url)
	code, out, stderr := execute(t, "records", "verify", "--state-dir", stateB, id1[:8])
	if code != ExitOK || !strings.Contains(stderr, "pulled record "+id1) {
		t.Fatalf("records verify on B: exit %d\n%s\n%s", code, out, stderr)
	}
	code, out, stderr = execute(t, "records", "diff", "--state-dir", stateB, id1[:8], id2[:8])
	if code != ExitOK || !strings.Contains(stderr, "pulled record "+id2) || !strings.Contains(out, "out003") {
		t.Fatalf("records diff on B: exit %d\n%s\n%s", code, out, stderr)
	}
	to := filepath.Join(t.TempDir(), "out")
	code, out, stderr = execute(t, "records", "export", "--state-dir", stateB, id2, "--to", to)
	if code != ExitOK {
		t.Fatalf("records export on B: exit %d\n%s\n%s", code, out, stderr)
	}
	b, err := os.ReadFile(filepath.Join(to, "produce", "out003", "data"))
	if err != nil || !bytes.HasPrefix(b, []byte("output 3 of 4\n")) {
		t.Fatalf("exported output: %.20q, %v", b, err)
	}
	// Here now: nothing more is pulled.
	code, _, stderr = execute(t, "records", "pull", "--state-dir", stateB, id1)
	if code != ExitOK || stderr != "" {
		t.Fatalf("records pull of a record B has: exit %d\n%s", code, stderr)
	}
	code, _, stderr = execute(t, "records", "show", "--state-dir", stateB, "zzzzzzzz")
	if code != ExitInvalid || !strings.Contains(stderr, "neither here nor in "+url) {
		t.Fatalf("records show of an id in neither: exit %d\n%s", code, stderr)
	}
}

// TestRecordsTamperedInBucket: a changed object is refused on pull (exit
// status 1, naming it) and nothing of the record is kept.
func TestRecordsTamperedInBucket(t *testing.T) {
	srv, url := sharedBucket(t)
	stateA, stateB := t.TempDir(), t.TempDir()
	a, err := record.OpenStore(stateA)
	if err != nil {
		t.Fatal(err)
	}
	id := remotetest.MakeRecord(t, a, 2, 100)
	if code, _, stderr := execute(t, "records", "push", "--state-dir", stateA, "--store", url, id.String()); code != ExitOK {
		t.Fatalf("push: exit %d\n%s", code, stderr)
	}
	r, err := a.Get(id)
	if err != nil {
		t.Fatal(err)
	}
	key := "ci/" + record.BlobKey(r.Steps[0].Logs.Stdout)
	bad := []byte("forged log\n")
	if _, err := srv.Client(t).PutObject(context.Background(), "records", key, bytes.NewReader(bad), int64(len(bad)), minio.PutObjectOptions{DisableContentSha256: true}); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := execute(t, "records", "verify", "--state-dir", stateB, "--store", url, id.String())
	if code != ExitStepFailed || !strings.Contains(stderr, "hash mismatch") || !strings.Contains(stderr, record.BlobKey(r.Steps[0].Logs.Stdout)) {
		t.Fatalf("verify of a record with a changed blob in the bucket: exit %d\n%s", code, stderr)
	}
	code, _, stderr = execute(t, "records", "show", "--state-dir", stateB, id.String())
	if code != ExitInvalid {
		t.Fatalf("a refused pull left the record in B: show exit %d\n%s", code, stderr)
	}
}

// TestRecordsStoreErrors: bad credentials, an endpoint nobody answers, a
// malformed URL and no store at all each say what to check; the local
// record is untouched.
func TestRecordsStoreErrors(t *testing.T) {
	srv, url := sharedBucket(t)
	state := t.TempDir()
	a, err := record.OpenStore(state)
	if err != nil {
		t.Fatal(err)
	}
	id := remotetest.MakeRecord(t, a, 1, 10).String()

	t.Setenv("AWS_SECRET_ACCESS_KEY", "wrong")
	code, _, stderr := execute(t, "records", "push", "--state-dir", state, "--store", url, id)
	if code != ExitInfra || !strings.Contains(stderr, "check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY") {
		t.Fatalf("push with a wrong secret: exit %d\n%s", code, stderr)
	}
	t.Setenv("AWS_SECRET_ACCESS_KEY", "")
	code, _, stderr = execute(t, "records", "push", "--state-dir", state, "--store", url, id)
	if code != ExitInvalid || !strings.Contains(stderr, "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY") {
		t.Fatalf("push without a secret: exit %d\n%s", code, stderr)
	}
	t.Setenv("AWS_SECRET_ACCESS_KEY", s3test.SecretKey)

	srv.Kill()
	code, _, stderr = execute(t, "records", "push", "--state-dir", state, "--store", url, id)
	if code != ExitInfra || !strings.Contains(stderr, "cannot reach "+srv.Endpoint) || !strings.Contains(stderr, "that the S3 server is running") {
		t.Fatalf("push to a dead endpoint: exit %d\n%s", code, stderr)
	}
	code, _, stderr = execute(t, "records", "verify", "--state-dir", t.TempDir(), "--store", url, id)
	if code != ExitInfra || !strings.Contains(stderr, "cannot reach "+srv.Endpoint) {
		t.Fatalf("verify of a record only in a dead store: exit %d\n%s", code, stderr)
	}
	if code, _, stderr := execute(t, "records", "verify", "--state-dir", state, id); code != ExitOK {
		t.Fatalf("the local record after failed pushes: exit %d\n%s", code, stderr)
	}

	for _, tc := range []struct{ args, want string }{
		{"records push --store http://x/y " + id, "want s3://BUCKET/PREFIX"},
		{"records push --store s3://b/p?endpoint=x " + id, "want HOST:PORT"},
		{"records push --store file://rel " + id, "absolute path"},
		{"records push " + id, "no shared store: pass --store URL or set $" + storeEnv},
	} {
		code, _, stderr := execute(t, append(strings.Fields(tc.args), "--state-dir", state)...)
		if code != ExitInvalid || !strings.Contains(stderr, tc.want) {
			t.Errorf("%s: exit %d\n%s", tc.args, code, stderr)
		}
	}
}
