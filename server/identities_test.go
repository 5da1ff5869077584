package server

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/agentsandbox/agentsandbox/internal/testtier"
)

func hashOf(tok string) string {
	h := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(h[:])
}

func TestParseIdentities(t *testing.T) {
	ids, err := ParseIdentities([]byte(`# who may call
identities:
  - name: ci
    token_sha256: ` + hashOf("ci-token") + `
  - name: ops
    token_sha256: ` + strings.ToUpper(hashOf("ops-token")) + `
    role: admin
    limits: {max_sandboxes: 40, max_in_flight: 64}
  - name: agent-7
    token_sha256: ` + hashOf("agent-token") + `
    role: user
    limits:
      max_runs: 1
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != 3 {
		t.Fatalf("%d identities", len(ids))
	}
	ci, ops, agent := ids[0], ids[1], ids[2]
	if ci.Name != "ci" || ci.Admin || ci.TokenSHA256 != sha256.Sum256([]byte("ci-token")) ||
		ci.MaxSandboxes != DefaultIdentityMaxSandboxes || ci.MaxRuns != DefaultIdentityMaxRuns || ci.MaxInFlight != DefaultIdentityMaxInFlight {
		t.Errorf("ci: %+v", ci)
	}
	if !ops.Admin || ops.TokenSHA256 != sha256.Sum256([]byte("ops-token")) || ops.MaxSandboxes != 40 || ops.MaxInFlight != 64 || ops.MaxRuns != DefaultIdentityMaxRuns {
		t.Errorf("ops: %+v", ops)
	}
	if agent.Admin || agent.MaxRuns != 1 || agent.MaxSandboxes != DefaultIdentityMaxSandboxes {
		t.Errorf("agent-7: %+v", agent)
	}
	// JSON is YAML.
	if ids, err := ParseIdentities([]byte(`{"identities": [{"name": "ci", "token_sha256": "` + hashOf("t") + `"}]}`)); err != nil || len(ids) != 1 {
		t.Errorf("JSON: %v %v", ids, err)
	}
}

func TestParseIdentitiesRefuses(t *testing.T) {
	h1, h2 := hashOf("one"), hashOf("two")
	entry := func(name, hash, rest string) string {
		return "  - name: " + name + "\n    token_sha256: " + hash + "\n" + rest
	}
	for _, c := range []struct {
		name, file string
		want       []string
	}{
		{"empty", ``, []string{"empty"}},
		{"no list", "identities: []\n", []string{"no identities"}},
		{"unknown top key", "identities: []\ntokens: []\n", []string{"tokens"}},
		{"unknown entry key", "identities:\n" + entry("ci", h1, "    token: hunter2\n"), []string{"token", "not found"}},
		{"unknown limit", "identities:\n" + entry("ci", h1, "    limits: {max_cpus: 2}\n"), []string{"max_cpus"}},
		{"no name", "identities:\n  - token_sha256: " + h1 + "\n", []string{"line 2", "no name"}},
		{"bad name", "identities:\n" + entry("CI_bot", h1, ""), []string{"line 2", "CI_bot", "DNS label"}},
		{"unix name", "identities:\n" + entry("uid-0", h1, ""), []string{"uid-0", "unix socket"}},
		{"no token", "identities:\n  - name: ci\n", []string{"no token_sha256", "sha256sum"}},
		{"the token itself", "identities:\n" + entry("ci", "hunter2-hunter2-hunter2", ""), []string{"64 hex digits", "not the token itself"}},
		{"short hash", "identities:\n" + entry("ci", h1[:62], ""), []string{"64 hex digits"}},
		{"empty token's hash", "identities:\n" + entry("ci", hashOf(""), ""), []string{"empty string"}},
		{"bad role", "identities:\n" + entry("ci", h1, "    role: root\n"), []string{`role "root"`, "user or admin"}},
		{"zero limit", "identities:\n" + entry("ci", h1, "    limits: {max_runs: 0}\n"), []string{"limits.max_runs 0", "1 or more"}},
		{"negative limit", "identities:\n" + entry("ci", h1, "    limits: {max_sandboxes: -1}\n"), []string{"max_sandboxes -1"}},
		{"fractional limit", "identities:\n" + entry("ci", h1, "    limits: {max_sandboxes: 1.5}\n"), []string{`"1.5" is not a whole number`}},
		{"quoted limit", "identities:\n" + entry("ci", h1, "    limits: {max_sandboxes: \"2\"}\n"), []string{`"2" is not a whole number`}},
		{"duplicate name", "identities:\n" + entry("ci", h1, "") + entry("ci", h2, ""), []string{"line 4", `name "ci" is also identities[0]'s`}},
		{"duplicate token", "identities:\n" + entry("ci", h1, "") + entry("bot", strings.ToUpper(h1), ""), []string{"line 4", "bot", "token_sha256 is also identities[0]'s (ci)"}},
		{"duplicate key", "identities:\n" + entry("ci", h1, "    name: other\n"), []string{"already defined"}},
		{"two documents", "identities:\n" + entry("ci", h1, "") + "---\nidentities: []\n", []string{"more than one YAML document"}},
		{"not a list", "identities: ci\n", []string{"identities"}},
	} {
		_, err := ParseIdentities([]byte(c.file))
		if err == nil {
			t.Errorf("%s: parsed", c.name)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not say %q", c.name, err, w)
			}
		}
		if strings.Contains(err.Error(), "hunter2-hunter2-hunter2") {
			t.Errorf("%s: the message shows the would-be token: %v", c.name, err)
		}
	}
}

// TestReadSecretFile: the identities and token files must be regular
// files of the server's user that group and others can neither read nor
// write; a FIFO is refused without blocking; a symlink to a good file (a
// mounted secret) is followed.
func TestReadSecretFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	os.WriteFile(good, []byte("x"), 0o600)
	if b, err := ReadSecretFile(good, 10); err != nil || string(b) != "x" {
		t.Errorf("a 0600 file: %q %v", b, err)
	}
	link := filepath.Join(dir, "link")
	os.Symlink(good, link)
	if _, err := ReadSecretFile(link, 10); err != nil {
		t.Errorf("a symlink to a 0600 file: %v", err)
	}
	for _, mode := range []os.FileMode{0o640, 0o604, 0o620, 0o602, 0o644} {
		p := filepath.Join(dir, "m"+mode.String())
		os.WriteFile(p, []byte("x"), 0o600)
		os.Chmod(p, mode)
		if _, err := ReadSecretFile(p, 10); err == nil || !strings.Contains(err.Error(), "chmod 600") {
			t.Errorf("mode %04o: %v, want a refusal saying chmod 600", mode, err)
		}
	}
	if _, err := ReadSecretFile(good, 0); err == nil || !strings.Contains(err.Error(), "over 0 bytes") {
		t.Errorf("a file over the bound: %v", err)
	}
	if _, err := ReadSecretFile(dir, 10); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a directory: %v", err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadSecretFile(fifo, 10); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a FIFO: %v", err)
	}

	t.Run("owner", func(t *testing.T) {
		testtier.Root(t)
		p := filepath.Join(dir, "theirs")
		os.WriteFile(p, []byte("x"), 0o600)
		if err := os.Chown(p, 1000, 1000); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadSecretFile(p, 10); err == nil || !strings.Contains(err.Error(), "owned by uid 1000") {
			t.Errorf("a file of uid 1000: %v", err)
		}
	})

	// LoadIdentities is the two together.
	p := filepath.Join(dir, "ids.yaml")
	os.WriteFile(p, []byte("identities:\n  - name: ci\n    token_sha256: "+hashOf("t")+"\n"), 0o644)
	if _, err := LoadIdentities(p); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("a world-readable identities file: %v", err)
	}
	os.Chmod(p, 0o600)
	if ids, err := LoadIdentities(p); err != nil || len(ids) != 1 {
		t.Errorf("LoadIdentities: %v %v", ids, err)
	}
	os.WriteFile(p, []byte("identities:\n  - name: ci\n"), 0o600)
	if _, err := LoadIdentities(p); err == nil || !strings.Contains(err.Error(), p+": line 2") {
		t.Errorf("a bad identities file: %v, want its path and line", err)
	}
}
