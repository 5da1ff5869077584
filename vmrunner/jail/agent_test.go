package jail

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentsandbox/agentsandbox/vmrunner/jail/jailwire"
)

func TestHelloCheck(t *testing.T) {
	our := jailwire.OurHello()
	for _, c := range []struct {
		name string
		h    jailwire.Hello
		want string // "" accepts
	}{
		{"same", our, ""},
		{"no build id", jailwire.Hello{Protocol: our.Protocol, Job: our.Job}, ""},
		{"other protocol", jailwire.Hello{Protocol: our.Protocol + 1, Job: our.Job}, "jail protocol"},
		{"other job protocol", jailwire.Hello{Protocol: our.Protocol, Job: our.Job + 1}, "job protocol"},
	} {
		err := c.h.Check()
		if (err == nil) != (c.want == "") || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s: check(%+v) = %v, want %q", c.name, c.h, err, c.want)
		}
	}
	// Build ids count only when both sides have one.
	if our.Build == "" {
		if err := (jailwire.Hello{Protocol: our.Protocol, Job: our.Job, Build: "abc"}).Check(); err != nil {
			t.Errorf("a build id against none: %v", err)
		}
	} else if err := (jailwire.Hello{Protocol: our.Protocol, Job: our.Job, Build: "abc"}).Check(); err == nil {
		t.Errorf("build abc against %s accepted", our.Build)
	}
}

func TestAgentPath(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, AgentName)
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(AgentEnv, bin)
	if p, err := AgentPath(); err != nil || p != bin {
		t.Errorf("AgentPath() = %q, %v; want %q", p, err, bin)
	}
	if err := os.Chmod(bin, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := AgentPath(); err == nil || !strings.Contains(err.Error(), "not an executable") {
		t.Errorf("a file that is not executable: %v", err)
	}
	// Without the variable: beside this executable, where a test binary
	// has none.
	t.Setenv(AgentEnv, "")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(filepath.Dir(exe), AgentName)
	_, err = AgentPath()
	var ae *AgentError
	if !errors.As(err, &ae) || ae.Path != want {
		t.Fatalf("AgentPath() without %s: %v, want an AgentError for %s", AgentEnv, err, want)
	}
	for _, s := range []string{want, "no such file", "make build", AgentEnv} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q lacks %q", err, s)
		}
	}
}

// TestJailAgentMissing: a jail with no agent fails to start, naming the
// path it tried and how to fix it.
func TestJailAgentMissing(t *testing.T) {
	cfg, _ := jailFixture(t, "true")
	missing := filepath.Join(t.TempDir(), AgentName)
	t.Setenv(AgentEnv, missing)
	_, err := Start(cfg)
	var ae *AgentError
	if !errors.As(err, &ae) || !strings.Contains(err.Error(), missing) || !strings.Contains(err.Error(), AgentEnv) {
		t.Fatalf("Start without an agent: %v", err)
	}
}

// TestJailAgentMismatch: an init of another protocol, or one that says
// nothing, is refused before it gets the config, and the error names it.
func TestJailAgentMismatch(t *testing.T) {
	for _, c := range []struct{ name, script, want string }{
		{"protocol", `echo '{"hello":{"protocol":999,"job":1}}' >&4; exec sleep 60`, "jail protocol 999"},
		{"no hello", `echo '{"ready":true}' >&4; exec sleep 60`, "did not start with a hello"},
		{"exits", `exit 3`, "exited without a hello"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, _ := jailFixture(t, "true")
			cfg.InitPath = filepath.Join(t.TempDir(), "old-agent")
			if err := os.WriteFile(cfg.InitPath, []byte("#!/bin/sh\n"+c.script+"\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			p, err := Start(cfg)
			if err != nil {
				t.Fatal(err)
			}
			err = p.Release()
			var ae *AgentError
			if !errors.As(err, &ae) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), cfg.InitPath) {
				t.Fatalf("Release: %v, want an AgentError for %s saying %q", err, cfg.InitPath, c.want)
			}
			select {
			case <-p.Done():
			default:
				t.Error("the refused init is still running")
			}
		})
	}
}

// TestJailInitIsAgent: with no InitPath the jail's PID 1 is the static
// agent, not this binary.
func TestJailInitIsAgent(t *testing.T) {
	cfg, _ := jailFixture(t, "sleep 60")
	want, err := AgentPath()
	if err != nil {
		t.Fatal(err)
	}
	p, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Kill(); _ = p.Wait() }()
	if err := p.Release(); err != nil {
		t.Fatal(err)
	}
	waitForDescendant(t, p.Pid(), "sleep")
	got, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", p.Pid()))
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("the jail's init is %s, want the agent %s", got, want)
	}
}
