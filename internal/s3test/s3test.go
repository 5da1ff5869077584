// Package s3test runs a real S3 server, versitygw, on 127.0.0.1 for the
// tests of the shared store (tier s3). scripts/install-versitygw.sh builds
// it into $(go env GOPATH)/bin; Binary finds it there, at $VERSITYGW or on
// PATH. Outside CI a missing versitygw skips the test; with CI=true it
// fails it.
package s3test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/agentsandbox/agentsandbox/internal/testtier"
)

// The root credentials of every test server.
const (
	AccessKey = "agentsandbox-test"
	SecretKey = "agentsandbox-test-secret"
)

var (
	findOnce sync.Once
	found    string
)

// Binary returns versitygw's path, or skips (fails in CI) the test.
func Binary(t testing.TB) string {
	t.Helper()
	findOnce.Do(func() { found = find() })
	if found == "" {
		testtier.Skip(t, "s3", "versitygw not found ($VERSITYGW, PATH, $(go env GOPATH)/bin); scripts/install-versitygw.sh installs it")
	}
	return found
}

func find() string {
	if c := os.Getenv("VERSITYGW"); c != "" {
		return c
	}
	if c, err := exec.LookPath("versitygw"); err == nil {
		return c
	}
	if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		for _, dir := range filepath.SplitList(strings.TrimSpace(string(out))) {
			c := filepath.Join(dir, "bin", "versitygw")
			if _, err := os.Stat(c); err == nil {
				return c
			}
		}
	}
	return ""
}

// Server is a versitygw serving a posix directory on 127.0.0.1.
type Server struct {
	Endpoint string // 127.0.0.1:PORT
	Dir      string // the directory holding the buckets (BUCKET/KEY)
	bin      string
	t        testing.TB

	mu    sync.Mutex
	cmd   *exec.Cmd
	out   *strings.Builder
	rchar int64 // the server's bytes read when it became ready
}

// Start runs a server for the test; it is killed at the test's end.
func Start(t testing.TB) *Server {
	t.Helper()
	s := &Server{bin: Binary(t), Dir: t.TempDir(), t: t}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.Endpoint = l.Addr().String()
	l.Close()
	s.Restart()
	t.Cleanup(s.Kill)
	return s
}

// Restart starts the server (again, after Kill) on the same port and
// directory, and waits until it answers.
func (s *Server) Restart() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	cmd := exec.Command(s.bin, "--port", s.Endpoint, "posix", s.Dir)
	cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY="+AccessKey, "ROOT_SECRET_KEY="+SecretKey)
	out := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("start versitygw: %v", err)
	}
	s.cmd, s.out = cmd, out
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", s.Endpoint, time.Second)
		if err == nil {
			c.Close()
			s.rchar = readChars(cmd.Process.Pid)
			return
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			s.t.Fatalf("versitygw did not listen on %s in 20s: %v; its output:\n%s", s.Endpoint, err, out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Kill kills the server (SIGKILL) and waits for it.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Kill()
	s.cmd.Wait()
	s.cmd = nil
}

// Client is a root client of the server, for making buckets and for
// changing objects behind the store's back.
func (s *Server) Client(t testing.TB) *minio.Client {
	t.Helper()
	c, err := minio.New(s.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(AccessKey, SecretKey, ""), BucketLookup: minio.BucketLookupPath})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Bucket makes a bucket and returns its name.
func (s *Server) Bucket(t testing.TB, name string) string {
	t.Helper()
	if err := s.Client(t).MakeBucket(context.Background(), name, minio.MakeBucketOptions{}); err != nil {
		t.Fatalf("make bucket %s: %v", name, err)
	}
	return name
}

// URL is the store URL of bucket/prefix on this server.
func (s *Server) URL(bucket, prefix string) string {
	return fmt.Sprintf("s3://%s/%s?endpoint=%s&insecure=1", bucket, prefix, s.Endpoint)
}

// Env returns getenv for the server's credentials (s3store.ParseURL).
func Env(name string) string {
	switch name {
	case "AWS_ACCESS_KEY_ID":
		return AccessKey
	case "AWS_SECRET_ACCESS_KEY":
		return SecretKey
	}
	return ""
}

// Receiving reports whether the server has read more than 1 MiB since it
// started (from /proc/PID/io): an upload is under way.
func (s *Server) Receiving() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return false
	}
	return readChars(s.cmd.Process.Pid)-s.rchar > 1<<20
}

func readChars(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "rchar: "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}
