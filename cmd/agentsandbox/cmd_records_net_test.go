package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/egress"
	"github.com/agentsandbox/agentsandbox/record"
)

// netRecord stores the sample record with a network log on its first
// step, as apply writes them, and returns the state directory and id.
func netRecord(t *testing.T) (string, record.ID) {
	t.Helper()
	raw, err := os.ReadFile("../../record/testdata/record.golden.json")
	if err != nil {
		t.Fatal(err)
	}
	r, err := record.Decode(raw)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	s, err := record.OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	var log strings.Builder
	for _, v := range []any{
		egress.Query{Type: "dns", Time: at, Step: r.Steps[0].Name, Name: "api.example.com", QType: "A", Rcode: "NOERROR", Answer: "198.19.0.1"},
		egress.Conn{Type: "conn", Time: at, Step: r.Steps[0].Name, Dst: "198.19.0.1:443", Name: "api.example.com", NameSource: egress.FromDNS,
			Decision: egress.Decision{Allow: true, Rule: "api.example.com:443", Reason: `network.allow "api.example.com:443"`}, Upstream: "203.0.113.10:443", BytesOut: 517, BytesIn: 5120, DurationMS: 41},
		egress.Query{Type: "dns", Time: at, Step: r.Steps[0].Name, Name: "evil.example.net", QType: "A", Rcode: "NXDOMAIN"},
		egress.Conn{Type: "conn", Time: at, Step: r.Steps[0].Name, Dst: "198.51.100.7:80",
			Decision: egress.Decision{Reason: `no network.allow entry matches 198.51.100.7 port 80; to allow it, add "198.51.100.7:80" to the step's network.allow`, Hint: "198.51.100.7:80"}},
		egress.Drops{Type: "drops", Step: r.Steps[0].Name, Packets: 3, Bytes: 180, By: map[string]uint64{"output": 3}},
	} {
		if err := writeJSONLine(&log, v); err != nil {
			t.Fatal(err)
		}
	}
	d, _, err := s.PutBlob(strings.NewReader(log.String()))
	if err != nil {
		t.Fatal(err)
	}
	r.Steps[0].Network = &record.Network{Allow: []string{"api.example.com:443"}, Bandwidth: 1e6, Log: d,
		Allowed: 1, Denied: 1, Queries: 2, NXDomain: 1, Dropped: 3, BytesOut: 517, BytesIn: 5120}
	id, err := s.Put(r)
	if err != nil {
		t.Fatal(err)
	}
	return dir, id
}

func TestRecordsNetAndShow(t *testing.T) {
	dir, id := netRecord(t)
	code, out, stderr := runCLI(t, "records", "net", "--state-dir", dir, id.String())
	if code != ExitOK {
		t.Fatalf("records net: exit %d: %s", code, stderr)
	}
	for _, want := range []string{"allow api.example.com:443", "api.example.com (dns)", "203.0.113.10:443", "NXDOMAIN",
		`add "198.51.100.7:80" to the step's network.allow`, "3 packets, 180 bytes dropped"} {
		if !strings.Contains(out, want) {
			t.Errorf("records net lacks %q:\n%s", want, out)
		}
	}
	code, out, _ = runCLI(t, "records", "net", "--state-dir", dir, "--denied", id.String())
	if code != ExitOK || strings.Contains(out, "203.0.113.10") || !strings.Contains(out, "198.51.100.7") || !strings.Contains(out, "evil.example.net") {
		t.Errorf("records net --denied (exit %d):\n%s", code, out)
	}
	code, out, _ = runCLI(t, "records", "net", "--state-dir", dir, "--json", id.String())
	lines, err := egress.ReadLog(strings.NewReader(out))
	if code != ExitOK || err != nil || len(lines) != 5 {
		t.Errorf("records net --json: exit %d, %d lines, %v:\n%s", code, len(lines), err, out)
	}
	code, out, _ = runCLI(t, "records", "show", "--state-dir", dir, id.String())
	if code != ExitOK || !strings.Contains(out, "1 connections allowed, 1 denied") || !strings.Contains(out, "records net "+id.String()) {
		t.Errorf("records show (exit %d) does not summarise the network:\n%s", code, out)
	}
	code, _, stderr = runCLI(t, "records", "net", "--state-dir", dir, "--step", "nosuch", id.String())
	if code != ExitInvalid || !strings.Contains(stderr, `no step "nosuch" with network egress`) {
		t.Errorf("records net --step nosuch: exit %d, %s", code, stderr)
	}

	// A damaged log is reported, never printed as if it were the run's.
	s, _ := record.OpenStore(dir)
	r, _ := s.Get(id)
	if err := os.WriteFile(filepath.Join(s.BlobPath(r.Steps[0].Network.Log)), []byte(`{"type":"conn"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = runCLI(t, "records", "net", "--state-dir", dir, id.String())
	if code != ExitStepFailed || !strings.Contains(stderr, "network log") {
		t.Errorf("records net over a tampered log: exit %d, %s", code, stderr)
	}
}
