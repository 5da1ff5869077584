package main

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentsandbox/agentsandbox/internal/testtier"
	"github.com/agentsandbox/agentsandbox/record"
)

const attestWorkflowYAML = `apiVersion: agentsandbox.dev/v1
kind: Workflow
name: attested
steps:
  - name: make
    isolation: namespace
    env:
      GREETING_TOKEN: never-in-an-attestation
    run: |
      mkdir -p out/sub
      printf alpha > out/a.txt
      printf beta > out/sub/b.txt
      printf report > report.txt
    outputs: [out, report.txt]
    resources: {timeout: 30s, memory: 256MiB}
`

// TestAttestRoot is keygen, apply, records attest and records verify
// --attestation end to end, then the same verify after a wrong key and a
// changed output blob.
func TestAttestRoot(t *testing.T) {
	testtier.Root(t)
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	wf := filepath.Join(dir, "attested.yaml")
	if err := os.WriteFile(wf, []byte(attestWorkflowYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(dir, "signing")
	if code, _, stderr := execute(t, "keygen", "--out", key); code != ExitOK {
		t.Fatalf("keygen: exit %d\n%s", code, stderr)
	}
	code, out, stderr := execute(t, "apply", "--state-dir", state, wf)
	if code != ExitOK {
		t.Fatalf("apply: exit %d\n%s\n%s", code, out, stderr)
	}
	id := lastLine(out)

	env := filepath.Join(dir, "run.intoto.json")
	code, out, stderr = execute(t, "records", "attest", "--state-dir", state, id[:10], "--key", key+".key", "--out", env,
		"--source", "git+https://git.example.org/wf.git@main#attested.yaml")
	if code != ExitOK || !strings.Contains(out, "4 subjects") {
		t.Fatalf("attest: exit %d\n%s\n%s", code, out, stderr)
	}
	raw, err := os.ReadFile(env)
	if err != nil {
		t.Fatal(err)
	}
	var e struct{ PayloadType, Payload string }
	if err := json.Unmarshal(raw, &e); err != nil {
		t.Fatal(err)
	}
	payload, _ := base64.StdEncoding.DecodeString(e.Payload)
	p := string(payload)
	for _, want := range []string{`"name":"make/out/a.txt"`, `"name":"make/out/sub/b.txt"`, `"name":"make/report.txt"`, `"name":"make/out"`,
		`"envNames":["GREETING_TOKEN"]`, `"invocationId":"` + id + `"`, `"memoryBytes":268435456`, `"source":"git+https://git.example.org/wf.git@main#attested.yaml"`} {
		if !strings.Contains(p, want) {
			t.Errorf("the statement lacks %s:\n%s", want, p)
		}
	}
	if strings.Contains(p, "never-in-an-attestation") {
		t.Error("an environment value is in the attestation")
	}

	code, out, stderr = execute(t, "records", "verify", "--state-dir", state, id, "--attestation", env, "--key", key+".pub")
	if code != ExitOK || !strings.Contains(out, "attestation "+env+" ok") || !strings.Contains(out, id+": ok") {
		t.Fatalf("verify --attestation: exit %d\n%s\n%s", code, out, stderr)
	}

	if code, _, stderr := execute(t, "records", "attest", "--state-dir", state, id); code != ExitInvalid || !strings.Contains(stderr, "--key KEY is required") {
		t.Errorf("attest without --key: exit %d\n%s", code, stderr)
	}

	// The default name, and standard output.
	t.Chdir(dir)
	if code, _, stderr := execute(t, "records", "attest", "--state-dir", state, id, "--key", key+".key"); code != ExitOK {
		t.Fatalf("attest to the default file: exit %d\n%s", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, id+".intoto.json")); err != nil {
		t.Error(err)
	}
	if code, out, _ := execute(t, "records", "attest", "--state-dir", state, id, "--key", key+".key", "--out", "-"); code != ExitOK || !strings.Contains(out, `"payloadType": "application/vnd.in-toto+json"`) {
		t.Errorf("attest --out -: exit %d\n%s", code, out)
	}

	// Another key's public key.
	other := filepath.Join(dir, "other")
	if code, _, stderr := execute(t, "keygen", "--type", "ed25519", "--out", other); code != ExitOK {
		t.Fatalf("keygen: %s", stderr)
	}
	code, _, stderr = execute(t, "records", "verify", "--state-dir", state, id, "--attestation", env, "--key", other+".pub")
	if code != ExitStepFailed || !strings.Contains(stderr, "mismatch: attestation "+env+": signature: no signature verifies") {
		t.Errorf("verify with another key: exit %d\n%s", code, stderr)
	}

	// A changed output: the record's own check and the subject both say so.
	s, err := record.OpenStore(state)
	if err != nil {
		t.Fatal(err)
	}
	rid, _ := record.ParseID(id)
	r, err := s.Get(rid)
	if err != nil {
		t.Fatal(err)
	}
	var nar record.NarHash
	for _, o := range r.Steps[0].Outputs {
		if o.Path == "out" {
			nar = o.NarHash
		}
	}
	blob := s.BlobPath(nar.Blob())
	b, _ := os.ReadFile(blob)
	b2 := []byte(strings.Replace(string(b), "alpha", "alphA", 1))
	os.Chmod(blob, 0o644)
	if err := os.WriteFile(blob, b2, 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = execute(t, "records", "verify", "--state-dir", state, id, "--attestation", env, "--key", key+".pub")
	if code != ExitStepFailed || !strings.Contains(stderr, "subject make/out: read the NAR") || !strings.Contains(stderr, "hash mismatch") {
		t.Errorf("verify after changing an output: exit %d\n%s", code, stderr)
	}
	if code, _, stderr := execute(t, "records", "attest", "--state-dir", state, id, "--key", key+".key", "--out", "-"); code != ExitStepFailed || !strings.Contains(stderr, "hash mismatch") {
		t.Errorf("attest of a damaged record: exit %d\n%s", code, stderr)
	}
}
