package provenance

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ed25519"
	"crypto/sha256"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/record"
)

// fixture is a store holding one hand-built record and every blob it names.
type fixture struct {
	store *record.Store
	id    record.ID
	rec   *record.Record
	wf    *Workflow
}

func put(t testing.TB, s *record.Store, b string) record.Digest {
	t.Helper()
	d, _, err := s.PutBlob(bytes.NewReader([]byte(b)))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// tree writes files (path → content; a "->target" content makes a symlink,
// a path ending in "*" an executable file) under a new directory and
// returns its NAR hash and size in s.
func tree(t testing.TB, s *record.Store, root string, files map[string]string) (record.NarHash, int64) {
	t.Helper()
	for p, c := range files {
		exec := false
		if p[len(p)-1] == '*' {
			p, exec = p[:len(p)-1], true
		}
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if len(c) > 2 && c[:2] == "->" {
			if err := os.Symlink(c[2:], full); err != nil {
				t.Fatal(err)
			}
			continue
		}
		mode := os.FileMode(0o644)
		if exec {
			mode = 0o755
		}
		if err := os.WriteFile(full, []byte(c), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(full, mode); err != nil { // whatever the umask
			t.Fatal(err)
		}
	}
	h, n, err := s.PutNAR(root)
	if err != nil {
		t.Fatal(err)
	}
	return h, n
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	dir := t.TempDir()
	s, err := record.OpenStore(filepath.Join(dir, "state"))
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 600000000, time.UTC)
	wfBytes := "apiVersion: agentsandbox.dev/v1\nkind: Workflow\nname: demo\n# steps elided in this fixture\n"
	outTree, outSize := tree(t, s, filepath.Join(dir, "out"), map[string]string{
		"a.txt":       "alpha\n",
		"sub/b.bin":   "\x00\x01\x02",
		"run.sh*":     "#!/bin/sh\necho hi\n",
		"link":        "->a.txt",
		"empty/.keep": "",
	})
	// A single-file output: its NAR is of the file itself.
	if err := os.WriteFile(filepath.Join(dir, "report-file"), []byte("report\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(dir, "report-file"), 0o644); err != nil {
		t.Fatal(err)
	}
	reportNar, reportSize, err := s.PutNAR(filepath.Join(dir, "report-file"))
	if err != nil {
		t.Fatal(err)
	}
	modelNar, modelSize := tree(t, s, filepath.Join(dir, "model"), map[string]string{"weights.bin": "0123456789"})

	hostRoot := record.DigestOf([]byte("host root"))
	seccomp := record.DigestOf([]byte("seccomp profile"))
	env := record.DigestOf([]byte("environment"))
	console := put(t, s, "console of train\n")
	lock := put(t, s, `{"nodes":{},"root":"root","version":7}`)
	gitCommit := "0123456789abcdef0123456789abcdef01234567"
	r := &record.Record{
		Version: record.Version, ToolVersion: "v0.9.0",
		Workflow: record.Workflow{
			Name: "demo", FileDigest: put(t, s, wfBytes),
			CanonicalHash: record.DigestOf([]byte("canonical form")),
			Lock:          &lock,
		},
		Policy: &record.Policy{
			DecisionID: "2f1c0b7e-0000-4000-8000-000000000001", BundleDigest: "sha256:" + record.DigestOf([]byte("bundle")).Hex(),
			InputDigest: "sha256:" + record.DigestOf([]byte("input")).Hex(), Allowed: true, Deny: []string{}, Warn: []string{"w"},
		},
		Host:    record.Host{Kernel: "6.1.0-18-amd64", Arch: "amd64", CgroupMode: "v2", KVMUsable: true, Nix: "nix (Nix) 2.8.0"},
		Started: t0, Finished: t0.Add(90 * time.Second), Status: record.StatusSucceeded,
		Inputs: []record.Input{
			{Name: "data", Kind: "http", Source: "https://data.example.org/d.csv", Format: record.FormatFile, Digest: put(t, s, "a,b\n1,2\n"), Size: 8},
			{Name: "code", Kind: "git", Source: "git::https://git.example.org/code.git", Commit: gitCommit, Format: record.FormatNAR, Digest: put(t, s, "nar of code"), Size: 11},
		},
		Steps: []record.Step{
			{
				Name: "build", Isolation: "namespace", Closure: []record.StorePath{}, HostRoot: &hostRoot, Seccomp: &seccomp,
				Inputs: map[string]record.Digest{}, JobDigest: put(t, s, `{"job":"build"}`),
				Started: t0.Add(time.Second), Finished: t0.Add(20 * time.Second), Status: record.StatusSucceeded,
				Logs: record.Logs{Stdout: put(t, s, "built\n"), Stderr: put(t, s, "")},
				Outputs: []record.Output{
					{Path: "out", NarHash: outTree, NarSize: outSize},
					{Path: "report.txt", NarHash: reportNar, NarSize: reportSize},
				},
				Network: &record.Network{Allow: []string{"data.example.org:443"}, Log: put(t, s, `{"conn":1}`+"\n"), Allowed: 1},
			},
			{
				Name: "train", Isolation: "vm", Hypervisor: "qemu", Accel: "kvm", Environment: &env,
				Closure: []record.StorePath{
					{Path: "/nix/store/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-python3-3.12.8", NarHash: record.NarHash(record.DigestOf([]byte("python"))), NarSize: 1000},
					{Path: "/nix/store/bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb-microvm-runner", NarHash: record.NarHash(record.DigestOf([]byte("runner"))), NarSize: 2000},
				},
				Inputs:    map[string]record.Digest{"code": record.DigestOf([]byte("nar of code"))},
				JobDigest: put(t, s, `{"job":"train"}`),
				Started:   t0.Add(21 * time.Second), Finished: t0.Add(89 * time.Second), Status: record.StatusSucceeded,
				Logs:    record.Logs{Stdout: put(t, s, "trained\n"), Stderr: put(t, s, "warning\n"), Console: &console},
				Outputs: []record.Output{{Path: "model", NarHash: modelNar, NarSize: modelSize}},
			},
			{
				Name: "zz-skipped", Isolation: "namespace", Closure: []record.StorePath{}, Inputs: map[string]record.Digest{},
				Status: record.StatusSkipped, ExitCode: -1, Outputs: []record.Output{},
			},
		},
	}
	id, err := s.Put(r)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(id)
	if err != nil {
		t.Fatal(err)
	}
	wf := &Workflow{
		Source: "git+https://git.example.org/workflows.git@refs/heads/main#demo.yaml",
		Steps: []Step{
			{Name: "train", Isolation: "auto", Hypervisor: "qemu",
				Limits:   Limits{VCPU: 2, MemoryBytes: 2 << 30, PIDs: 512, DiskBytes: 4 << 30, TimeoutMs: 3600000},
				EnvNames: []string{"SEED", "EPOCHS"}, Needs: []string{"build"}, Inputs: []string{"code"},
				Outputs: []string{"model"}, Packages: []string{"python3"}},
			{Name: "build", Isolation: "namespace",
				Limits:  Limits{VCPU: 1, MemoryBytes: 512 << 20, PIDs: 128, DiskBytes: 1 << 30, BandwidthBps: 8000000},
				Network: []string{"data.example.org:443"}, Outputs: []string{"report.txt", "out"}},
			{Name: "zz-skipped", Isolation: "auto", Limits: Limits{VCPU: 1, MemoryBytes: 1 << 30, PIDs: 64, DiskBytes: 1 << 30}},
			{Name: "not-selected", Isolation: "auto"},
		},
	}
	return &fixture{store: s, id: id, rec: got, wf: wf}
}

// testKey is a fixed ed25519 key: its signatures are fixed too.
func testKey() ed25519.PrivateKey {
	seed := sha256.Sum256([]byte("agentsandbox provenance known-answer key"))
	return ed25519.NewKeyFromSeed(seed[:])
}

// attest builds, signs and encodes f's attestation with key.
func (f *fixture) attest(t testing.TB, key crypto.Signer) []byte {
	t.Helper()
	st, err := Build(f.store, f.id, f.wf)
	if err != nil {
		t.Fatal(err)
	}
	env, err := Sign(context.Background(), st, key)
	if err != nil {
		t.Fatal(err)
	}
	b, err := EncodeEnvelope(env)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
