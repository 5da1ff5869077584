package provenance

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/record"
)

// bench100 is a store holding a record of 10 steps with 10 outputs each,
// every output a directory of 4 files of 16 KiB (6.4 MiB of files).
func bench100(b *testing.B) (*record.Store, record.ID) {
	b.Helper()
	dir := b.TempDir()
	s, err := record.OpenStore(filepath.Join(dir, "state"))
	if err != nil {
		b.Fatal(err)
	}
	chunk := make([]byte, 16<<10)
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	r := &record.Record{
		Version: record.Version, ToolVersion: "bench",
		Workflow: record.Workflow{Name: "bench", FileDigest: put(b, s, "name: bench\n"), CanonicalHash: record.DigestOf([]byte("c"))},
		Host:     record.Host{Kernel: "6.1.0", Arch: "amd64", CgroupMode: "v2"},
		Started:  t0, Finished: t0.Add(time.Minute), Status: record.StatusSucceeded, Inputs: []record.Input{},
	}
	for i := range 10 {
		st := record.Step{
			Name: fmt.Sprintf("step%02d", i), Isolation: "namespace", Closure: []record.StorePath{}, Inputs: map[string]record.Digest{},
			JobDigest: put(b, s, fmt.Sprintf("job %d", i)), Started: t0, Finished: t0.Add(time.Second), Status: record.StatusSucceeded,
			Logs: record.Logs{Stdout: put(b, s, fmt.Sprintf("out %d", i)), Stderr: put(b, s, "")},
		}
		for j := range 10 {
			root := filepath.Join(dir, st.Name, fmt.Sprintf("out%02d", j))
			for k := range 4 {
				chunk[0], chunk[1], chunk[2] = byte(i), byte(j), byte(k)
				p := filepath.Join(root, fmt.Sprintf("d%d", k%2), fmt.Sprintf("f%d.bin", k))
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					b.Fatal(err)
				}
				if err := os.WriteFile(p, chunk, 0o644); err != nil {
					b.Fatal(err)
				}
			}
			h, n, err := s.PutNAR(root)
			if err != nil {
				b.Fatal(err)
			}
			st.Outputs = append(st.Outputs, record.Output{Path: fmt.Sprintf("out%02d", j), NarHash: h, NarSize: n})
		}
		r.Steps = append(r.Steps, st)
	}
	id, err := s.Put(r)
	if err != nil {
		b.Fatal(err)
	}
	return s, id
}

func benchKey(b *testing.B) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	return k
}

// BenchmarkAttest100 is records attest's work on a 100-output record:
// read and verify the record, walk every NAR, build the Statement, encode
// it canonically and sign it with ECDSA P-256.
func BenchmarkAttest100(b *testing.B) {
	s, id := bench100(b)
	key := benchKey(b)
	ctx := context.Background()
	for b.Loop() {
		st, err := Build(s, id, nil)
		if err != nil {
			b.Fatal(err)
		}
		env, err := Sign(ctx, st, key)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := EncodeEnvelope(env); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkVerifyAttestation100 is records verify --attestation's own part
// on the same record: parse the envelope, check the signature, parse the
// Statement and walk every NAR again to compare the subjects.
func BenchmarkVerifyAttestation100(b *testing.B) {
	s, id := bench100(b)
	key := benchKey(b)
	ctx := context.Background()
	st, err := Build(s, id, nil)
	if err != nil {
		b.Fatal(err)
	}
	env, err := Sign(ctx, st, key)
	if err != nil {
		b.Fatal(err)
	}
	raw, err := EncodeEnvelope(env)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if p := Verify(ctx, s, id, bytes.NewReader(raw), key.Public()); len(p) > 0 {
			b.Fatal(p)
		}
	}
	b.ReportMetric(float64(len(raw)), "envelope-bytes")
	b.ReportMetric(float64(len(st.GetSubject())), "subjects")
}

// BenchmarkWalkNAR100 is the floor of both: verifying every output blob of
// the same record (record.Store.VerifyBlob), without parsing the NARs.
func BenchmarkWalkNAR100(b *testing.B) {
	s, id := bench100(b)
	r, err := s.Get(id)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		for _, st := range r.Steps {
			for _, o := range st.Outputs {
				if err := s.VerifyBlob(o.NarHash.Blob()); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
}
