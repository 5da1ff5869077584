package main

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/internal/testtier"
	"github.com/agentsandbox/agentsandbox/netns"
	"github.com/agentsandbox/agentsandbox/record"
	"github.com/agentsandbox/agentsandbox/vmrunner/cgroup"
)

// unixClient talks HTTP to a server's unix socket.
func unixClient(sock string) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
}

// TestServeKilledAndRestarted: a server killed with SIGKILL while a
// command runs takes its sandboxes with it (their agents have a
// parent-death signal); the next server start removes what they held,
// and the sandbox is cleanly gone (404), not half there.
func TestServeKilledAndRestarted(t *testing.T) {
	testtier.Root(t)
	dir := t.TempDir()
	bin := buildCLI(t, dir)
	state := filepath.Join(dir, "state")
	sock := filepath.Join(state, socketName)
	s := startApply(t, bin, "serve", "--state-dir", state)
	s.waitFor(t, "serving on unix socket", time.Minute)
	c := unixClient(sock)

	resp, err := c.Post("http://sandbox/v1/sandboxes", "application/json", strings.NewReader(`{"labels": {"test": "killed"}}`))
	if err != nil {
		t.Fatal(err)
	}
	var info struct{ ID string }
	json.NewDecoder(resp.Body).Decode(&info)
	resp.Body.Close()
	if resp.StatusCode != 201 || info.ID == "" {
		t.Fatalf("create: %d %+v", resp.StatusCode, info)
	}
	req, _ := http.NewRequest("PUT", "http://sandbox/v1/sandboxes/"+info.ID+"/files/notes.txt", strings.NewReader("kept"))
	if resp, err = c.Do(req); err != nil || resp.StatusCode != 200 {
		t.Fatalf("put a file: %v %v", resp, err)
	}
	resp.Body.Close()
	resp, err = c.Post("http://sandbox/v1/sandboxes/"+info.ID+"/exec", "application/json", strings.NewReader(`{"shell": "echo started; sleep 300"}`))
	if err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(resp.Body).ReadString('\n')
	if !strings.Contains(line, "started") {
		t.Fatalf("exec's first event: %q", line)
	}
	runs, _ := os.ReadDir(filepath.Join(state, "runs"))
	if len(runs) != 1 {
		t.Fatalf("sandbox directories while it runs: %v", runs)
	}
	s.cmd.Process.Signal(syscall.SIGKILL)
	s.wait()
	resp.Body.Close()

	s2 := startApply(t, bin, "serve", "--state-dir", state)
	s2.waitFor(t, "serving on unix socket", time.Minute)
	resp, err = c.Get("http://sandbox/v1/sandboxes/" + info.ID)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Errorf("the killed server's sandbox after a restart: %d, want 404 (cleanly gone)", resp.StatusCode)
	}
	// Its record is closed from the journal (before the new server
	// listens), with what was done in it.
	store, err := record.OpenStore(state)
	if err != nil {
		t.Fatal(err)
	}
	list, _ := store.List()
	var closed *record.Record
	for _, sum := range list {
		if r, err := store.Get(sum.ID); err == nil && r.Sandbox != nil && r.Sandbox.ID == info.ID {
			closed = r
			if problems, err := store.Verify(sum.ID); err != nil || len(problems) > 0 {
				t.Errorf("verify the recovered record: %v %v", problems, err)
			}
		}
	}
	if closed == nil {
		t.Fatal("no record of the killed server's sandbox")
	}
	if closed.Sandbox.Ended != "server killed" || closed.Status != record.StatusError || len(closed.Sandbox.Entries) != 1 ||
		closed.Sandbox.Entries[0].Kind != "file_put" || closed.Sandbox.Labels["test"] != "killed" {
		t.Errorf("recovered record: %+v %+v", closed.Sandbox, closed.Status)
	}
	if j, _ := os.ReadDir(filepath.Join(state, "sandboxes")); len(j) != 0 {
		t.Errorf("journals left: %v", j)
	}
	nss, _ := netns.List(netns.Prefix)
	for _, n := range nss {
		if strings.HasPrefix(n, netns.Prefix+info.ID[:8]) {
			t.Errorf("network namespace left: %s", n)
		}
	}
	if cgs, _ := cgroup.List("/agentsandbox/" + info.ID); len(cgs) > 0 {
		t.Errorf("cgroups left: %v", cgs)
	}
	if mounts, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(mounts), state) {
		t.Errorf("mounts left under the state directory")
	}
	if runs, _ := os.ReadDir(filepath.Join(state, "runs")); len(runs) != 0 {
		t.Errorf("sandbox directories left: %v", runs)
	}
	if pids := stepProcesses(t, "sleep", info.ID+"/sandbox"); len(pids) > 0 {
		t.Errorf("the sandbox's processes outlived the server: %v", pids)
	}
	s2.cmd.Process.Signal(syscall.SIGTERM)
	if err := s2.wait(); err != nil {
		t.Errorf("serve after SIGTERM: %v", err)
	}
	if _, err := os.Stat(sock); err == nil {
		t.Error("the socket is left after a clean stop")
	}
}

// --warm takes 0 to --max-sandboxes and --warm-template FILE#STEP=N with
// --templates, together within --max-sandboxes; anything else is a usage
// error before the server opens anything.
func TestServeWarmFlag(t *testing.T) {
	for _, args := range [][]string{
		{"--warm", "-1"},
		{"--warm", "5", "--max-sandboxes", "4"},
		{"--warm-template", "ci.yaml#test"},
		{"--warm-template", "ci.yaml=2", "--templates", "."},
		{"--warm-template", "ci.yaml#test=0", "--templates", "."},
		{"--warm-template", "ci.yaml#test=2"},
		{"--warm", "3", "--warm-template", "ci.yaml#test=2", "--templates", ".", "--max-sandboxes", "4"},
	} {
		code, _, stderr := execute(t, append([]string{"serve", "--state-dir", t.TempDir()}, args...)...)
		if code != ExitInvalid || !strings.Contains(stderr, "--warm") {
			t.Errorf("serve %v: exit %d, stderr %q", args, code, stderr)
		}
	}
}

// A --warm-template whose file is not in --templates is refused with exit
// 2 when the manager starts, before any sandbox is opened.
func TestServeWarmTemplateMissing(t *testing.T) {
	testtier.Root(t)
	code, _, stderr := execute(t, "serve", "--state-dir", t.TempDir(), "--templates", t.TempDir(), "--warm-template", "ci.yaml#test=1")
	if code != ExitInvalid || !strings.Contains(stderr, "warm pool of template ci.yaml#test") {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
}

// --exec-log-limit takes a size of 1MiB or more; anything else is a usage
// error before the server opens anything (for mcp too, which shares it).
func TestServeExecLogLimitFlag(t *testing.T) {
	for _, args := range [][]string{
		{"serve", "--exec-log-limit", "lots"},
		{"serve", "--exec-log-limit", "64KiB"},
		{"mcp", "--exec-log-limit", "-1"},
	} {
		code, _, stderr := execute(t, append(args, "--state-dir", t.TempDir())...)
		if code != ExitInvalid || !strings.Contains(stderr, "--exec-log-limit") {
			t.Errorf("%v: exit %d, stderr %q", args, code, stderr)
		}
	}
}
