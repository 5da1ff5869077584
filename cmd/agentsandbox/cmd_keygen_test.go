package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentsandbox/agentsandbox/record/provenance"
)

func TestKeygen(t *testing.T) {
	dir := t.TempDir()
	for _, kt := range []string{"ecdsa-p256", "ed25519"} {
		prefix := filepath.Join(dir, kt)
		code, out, stderr := execute(t, "keygen", "--type", kt, "--out", prefix)
		if code != ExitOK {
			t.Fatalf("keygen --type %s: exit %d\n%s", kt, code, stderr)
		}
		fi, err := os.Stat(prefix + ".key")
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s.key: %v, mode %v, want 0600", prefix, err, fi.Mode())
		}
		priv, _ := os.ReadFile(prefix + ".key")
		pub, _ := os.ReadFile(prefix + ".pub")
		k, err := provenance.ParsePrivateKey(priv)
		if err != nil {
			t.Fatal(err)
		}
		p, err := provenance.ParsePublicKey(pub)
		if err != nil {
			t.Fatal(err)
		}
		id, _ := provenance.KeyID(p)
		if kid, _ := provenance.KeyID(k.Public()); kid != id || !strings.Contains(out, "keyid       "+id) {
			t.Errorf("keygen printed\n%s\nwant keyid %s of the pair it wrote", out, id)
		}

		// Never overwrite: not the key, not the public key alone.
		code, _, stderr = execute(t, "keygen", "--type", kt, "--out", prefix)
		if code != ExitInvalid || !strings.Contains(stderr, "already exists") {
			t.Errorf("keygen over an existing pair: exit %d\n%s", code, stderr)
		}
		if again, _ := os.ReadFile(prefix + ".key"); string(again) != string(priv) {
			t.Error("the private key was overwritten")
		}
	}
	os.WriteFile(filepath.Join(dir, "half.pub"), []byte("x"), 0o644)
	if code, _, stderr := execute(t, "keygen", "--out", filepath.Join(dir, "half")); code != ExitInvalid || !strings.Contains(stderr, "half.pub already exists") {
		t.Errorf("keygen over an existing .pub: exit %d\n%s", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "half.key")); err == nil {
		t.Error("keygen left a private key without its public key")
	}
	if code, _, stderr := execute(t, "keygen", "--type", "rsa", "--out", filepath.Join(dir, "rsa")); code != ExitInvalid || !strings.Contains(stderr, "ecdsa-p256 or ed25519") {
		t.Errorf("keygen --type rsa: exit %d\n%s", code, stderr)
	}
	if code, _, _ := execute(t, "keygen"); code != ExitInvalid {
		t.Errorf("keygen without --out: exit %d, want %d", code, ExitInvalid)
	}
}

func TestVerifyAttestationFlagsGoTogether(t *testing.T) {
	code, _, stderr := execute(t, "records", "verify", "--state-dir", t.TempDir(), "--attestation", "x.intoto.json", "0")
	if code != ExitInvalid || !strings.Contains(stderr, "--attestation FILE and --key PUB go together") {
		t.Errorf("exit %d\n%s", code, stderr)
	}
}
