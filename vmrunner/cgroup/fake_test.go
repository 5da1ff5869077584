package cgroup

import (
	"bufio"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/cgroups/v3/cgroup2"
	"github.com/opencontainers/runtime-spec/specs-go"
)

// These tests run the library's cgroup1 and cgroup2 code, rooted at a fake
// cgroupfs: plain directories holding the files the kernel would offer.

func write(t *testing.T, p, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// fakeRmdir behaves like rmdir on cgroupfs: control files do not keep a
// directory alive, child directories do.
func fakeRmdir(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if e.IsDir() {
			return syscall.ENOTEMPTY
		}
	}
	return os.RemoveAll(dir)
}

// readKV reads a flat keyed file such as pids.events ("key value" per
// line).
func readKV(p string) (map[string]int64, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]int64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), " ")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return nil, err
		}
		out[k] = n
	}
	return out, sc.Err()
}

func fakeV2(t *testing.T, controllers string) string {
	mount := t.TempDir()
	write(t, filepath.Join(mount, "cgroup.controllers"), controllers+"\n")
	write(t, filepath.Join(mount, "cgroup.subtree_control"), "")
	return mount
}

// fakeV2Parents makes the parents of the group at rel the way the kernel's
// mkdir would: with a cgroup.subtree_control file, which the library opens
// without creating it.
func fakeV2Parents(t *testing.T, mount, rel string) {
	t.Helper()
	d := mount
	parts := strings.Split(strings.TrimPrefix(rel, "/"), "/")
	for _, p := range parts[:len(parts)-1] {
		d = filepath.Join(d, p)
		if !exists(filepath.Join(d, "cgroup.subtree_control")) {
			write(t, filepath.Join(d, "cgroup.subtree_control"), "")
		}
	}
}

func TestResourcesV2(t *testing.T) {
	mem, quota, period := int64(64<<20), int64(200000), uint64(100000)
	got := resourcesV2(Limits{MemoryBytes: mem, PIDs: 32, VCPU: 2, IOReadBps: 1000, IOWriteBps: 2000, IODevices: []Device{{254, 0}, {8, 16}}})
	want := &cgroup2.Resources{
		Memory: &cgroup2.Memory{Max: &mem},
		Pids:   &cgroup2.Pids{Max: 32},
		CPU:    &cgroup2.CPU{Max: cgroup2.NewCPUMax(&quota, &period)},
		IO: &cgroup2.IO{Max: []cgroup2.Entry{
			{Type: cgroup2.ReadBPS, Major: 254, Minor: 0, Rate: 1000},
			{Type: cgroup2.WriteBPS, Major: 254, Minor: 0, Rate: 2000},
			{Type: cgroup2.ReadBPS, Major: 8, Minor: 16, Rate: 1000},
			{Type: cgroup2.WriteBPS, Major: 8, Minor: 16, Rate: 2000},
		}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("resourcesV2 = %+v, want %+v", got, want)
	}
	if got.CPU.Max != "200000 100000" {
		t.Errorf("cpu.max = %q", got.CPU.Max)
	}
	// No limits: memory, pids and cpu are still enabled, for Usage.
	none := resourcesV2(Limits{})
	if c := none.EnabledControllers(); !reflect.DeepEqual(c, []string{"cpu", "memory", "pids"}) {
		t.Errorf("controllers without limits = %v", c)
	}
	if v := none.Values(); len(v) != 0 {
		t.Errorf("values without limits = %v, want none", v)
	}
}

func TestResourcesV1(t *testing.T) {
	mem, pids, quota, period := int64(64<<20), int64(32), int64(200000), uint64(100000)
	l := Limits{MemoryBytes: mem, PIDs: pids, VCPU: 2, IOWriteBps: 2000, IODevices: []Device{{254, 0}}}
	got := resourcesV1(l, true)
	want := &specs.LinuxResources{
		Memory:  &specs.LinuxMemory{Limit: &mem, Swap: &mem, KernelTCP: &mem},
		Pids:    &specs.LinuxPids{Limit: &pids},
		CPU:     &specs.LinuxCPU{Quota: &quota, Period: &period},
		BlockIO: &specs.LinuxBlockIO{ThrottleWriteBpsDevice: []specs.LinuxThrottleDevice{{LinuxBlockIODevice: specs.LinuxBlockIODevice{Major: 254, Minor: 0}, Rate: 2000}}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("resourcesV1 = %+v, want %+v", got, want)
	}
	if r := resourcesV1(Limits{MemoryBytes: mem}, false); r.Memory.Swap != nil {
		t.Error("memsw limit set where the kernel does not account swap")
	}
	if r := resourcesV1(Limits{}, true); !reflect.DeepEqual(r, &specs.LinuxResources{}) {
		t.Errorf("resources without limits = %+v", r)
	}
}

func TestV2Limits(t *testing.T) {
	mount := fakeV2(t, "cpuset cpu io memory hugetlb pids rdma misc")
	leaf := filepath.Join(mount, "asb/run/step")
	fakeV2Parents(t, mount, "/asb/run/step")
	write(t, filepath.Join(leaf, "memory.swap.max"), "max\n") // the kernel accounts swap
	l := Limits{MemoryBytes: 64 << 20, PIDs: 32, VCPU: 2, IOReadBps: 1000, IOWriteBps: 2000, IODevices: []Device{{254, 0}}}
	g, err := newAt("v2", mount, "/asb/run/step", l)
	if err != nil {
		t.Fatal(err)
	}
	if g.Version() != "v2" || !reflect.DeepEqual(g.Dirs(), []string{leaf}) {
		t.Errorf("version %s dirs %v", g.Version(), g.Dirs())
	}
	for _, d := range []string{"", "asb", "asb/run"} {
		if got := read(t, filepath.Join(mount, d, "cgroup.subtree_control")); got != "+cpu +memory +pids +io" {
			t.Errorf("%s/cgroup.subtree_control = %q", d, got)
		}
	}
	if exists(filepath.Join(leaf, "cgroup.subtree_control")) {
		t.Error("controllers enabled below the step's own group")
	}
	want := map[string]string{
		"memory.max":      "67108864",
		"memory.swap.max": "0",
		"pids.max":        "32",
		"cpu.max":         "200000 100000",
		// The library writes one io.max line per limit; a fake file
		// keeps the last (TestResourcesV2 checks them all).
		"io.max": "254:0 wbps=2000",
	}
	for f, v := range want {
		if got := read(t, filepath.Join(leaf, f)); got != v {
			t.Errorf("%s = %q, want %q", f, got, v)
		}
	}

	if err := g.Add(4242); err != nil {
		t.Fatal(err)
	}
	if got := read(t, filepath.Join(leaf, "cgroup.procs")); got != "4242" {
		t.Errorf("cgroup.procs = %q", got)
	}
	f, err := g.FD()
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
}

func TestV2NoSwapAccountingNoIO(t *testing.T) {
	mount := fakeV2(t, "cpu memory pids")
	fakeV2Parents(t, mount, "/asb/r/s")
	g, err := newAt("v2", mount, "/asb/r/s", Limits{MemoryBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	leaf := g.Dirs()[0]
	if exists(filepath.Join(leaf, "memory.swap.max")) {
		t.Error("wrote memory.swap.max where the kernel has none")
	}
	for _, f := range []string{"pids.max", "cpu.max", "io.max"} {
		if exists(filepath.Join(leaf, f)) {
			t.Errorf("wrote %s without a limit", f)
		}
	}
	if got := read(t, filepath.Join(mount, "cgroup.subtree_control")); got != "+cpu +memory +pids" {
		t.Errorf("subtree_control = %q", got)
	}
	_, err = newAt("v2", mount, "/asb/r/t", Limits{IOWriteBps: 1, IODevices: []Device{{8, 0}}})
	if err == nil || !strings.Contains(err.Error(), "io") {
		t.Errorf("io limit without the io controller: %v", err)
	}
}

func TestLimitsValidate(t *testing.T) {
	if err := (Limits{IOReadBps: 5}).validate(); err == nil || !strings.Contains(err.Error(), "IODevices") {
		t.Errorf("io limit without devices: %v", err)
	}
	if err := (Limits{PIDs: -1}).validate(); err == nil {
		t.Error("negative limit accepted")
	}
	for _, p := range []string{"", "/", "rel", "/a/../b", "/a/"} {
		if checkPath(p) == nil {
			t.Errorf("checkPath(%q) accepted", p)
		}
	}
}

func TestV2Usage(t *testing.T) {
	mount := fakeV2(t, "cpu memory pids")
	fakeV2Parents(t, mount, "/asb/r/s")
	g, err := newAt("v2", mount, "/asb/r/s", Limits{})
	if err != nil {
		t.Fatal(err)
	}
	leaf := g.Dirs()[0]
	write(t, filepath.Join(leaf, "memory.stat"), "anon 4096\nfile 0\n")
	write(t, filepath.Join(leaf, "memory.peak"), "1048576\n")
	write(t, filepath.Join(leaf, "memory.current"), "4096\n")
	write(t, filepath.Join(leaf, "cpu.stat"), "usage_usec 1500\nuser_usec 1000\nsystem_usec 500\nnr_periods 3\nnr_throttled 1\nthrottled_usec 250\n")
	write(t, filepath.Join(leaf, "memory.events"), "low 0\nhigh 0\nmax 7\noom 2\noom_kill 2\noom_group_kill 0\n")
	write(t, filepath.Join(leaf, "pids.current"), "3\n")
	write(t, filepath.Join(leaf, "pids.peak"), "9\n")
	u, err := g.Usage()
	if err != nil {
		t.Fatal(err)
	}
	want := Usage{PeakMemoryBytes: 1 << 20, CPUTime: 1500 * time.Microsecond, PidsPeak: 9, OOMKills: 2, ThrottledTime: 250 * time.Microsecond, MemoryBytes: 4096, Pids: 3}
	if u != want {
		t.Errorf("usage = %+v, want %+v", u, want)
	}

	// Older kernels: no memory.peak, no pids.peak.
	os.Remove(filepath.Join(leaf, "memory.peak"))
	os.Remove(filepath.Join(leaf, "pids.peak"))
	write(t, filepath.Join(leaf, "pids.current"), "5\n")
	if u, err = g.Usage(); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(leaf, "pids.current"), "2\n")
	if u, err = g.Usage(); err != nil {
		t.Fatal(err)
	}
	if u.PeakMemoryBytes != 4096 || u.PidsPeak != 5 {
		t.Errorf("fallback usage = %+v, want memory.current 4096 and the highest pids.current seen, 5", u)
	}
}

func TestV2KillDeleteList(t *testing.T) {
	mount := fakeV2(t, "cpu memory pids")
	var groups []*Group
	for _, p := range []string{"/asb/r1/a", "/asb/r1/b", "/asb/r2/a"} {
		fakeV2Parents(t, mount, p)
		g, err := newAt("v2", mount, p, Limits{})
		if err != nil {
			t.Fatal(err)
		}
		g.rmdir = fakeRmdir
		write(t, filepath.Join(g.Dirs()[0], "cgroup.kill"), "")
		write(t, filepath.Join(g.Dirs()[0], "cgroup.procs"), "")
		groups = append(groups, g)
	}
	top, err := openAt("v2", mount, "/asb")
	if err != nil {
		t.Fatal(err)
	}
	got, err := top.leaves()
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"/asb/r1/a", "/asb/r1/b", "/asb/r2/a"}; !reflect.DeepEqual(got, want) {
		t.Errorf("leaves = %v, want %v", got, want)
	}

	if err := groups[0].Kill(); err != nil {
		t.Fatal(err)
	}
	if got := read(t, filepath.Join(groups[0].Dirs()[0], "cgroup.kill")); got != "1" {
		t.Errorf("cgroup.kill = %q, want 1", got)
	}
	if err := groups[0].Delete(); err != nil {
		t.Fatal(err)
	}
	if exists(filepath.Join(mount, "asb/r1/a")) || !exists(filepath.Join(mount, "asb/r1/b")) {
		t.Error("Delete removed the wrong group")
	}
	if err := groups[1].Delete(); err != nil {
		t.Fatal(err)
	}
	if exists(filepath.Join(mount, "asb/r1")) {
		t.Error("the emptied run directory is left")
	}
	if !exists(filepath.Join(mount, "asb/r2/a")) {
		t.Error("Delete pruned a parent that still has a group")
	}
	if err := groups[2].Delete(); err != nil {
		t.Fatal(err)
	}
	if exists(filepath.Join(mount, "asb")) {
		t.Error("the emptied top directory is left")
	}
	if err := groups[2].Delete(); err != nil {
		t.Errorf("second Delete: %v", err)
	}
}

func TestDeleteWaitsAndNamesLeftovers(t *testing.T) {
	mount := fakeV2(t, "cpu memory pids")
	fakeV2Parents(t, mount, "/asb/r/s")
	g, err := newAt("v2", mount, "/asb/r/s", Limits{})
	if err != nil {
		t.Fatal(err)
	}
	g.rmdir = fakeRmdir
	leaf := g.Dirs()[0]
	write(t, filepath.Join(leaf, "cgroup.kill"), "")
	// pid 2^22+1 is above pid_max, so the fake's process never leaves.
	write(t, filepath.Join(leaf, "cgroup.procs"), "4194305\n")
	old := deleteTimeout
	deleteTimeout = 50 * time.Millisecond
	defer func() { deleteTimeout = old }()
	err = g.Delete()
	if err == nil || !strings.Contains(err.Error(), "4194305") {
		t.Fatalf("Delete of a group that stays busy = %v, want an error naming pid 4194305", err)
	}
	if !exists(leaf) {
		t.Error("Delete removed a busy group")
	}
}

func fakeV1(t *testing.T, swap bool, controllers ...string) string {
	root := t.TempDir()
	for _, c := range controllers {
		write(t, filepath.Join(root, c, "cgroup.procs"), "")
	}
	if exists(filepath.Join(root, "memory")) {
		write(t, filepath.Join(root, "memory", "memory.kmem.tcp.limit_in_bytes"), "9223372036854771712\n")
	}
	if swap {
		write(t, filepath.Join(root, "memory", "memory.memsw.limit_in_bytes"), "9223372036854771712\n")
		write(t, filepath.Join(root, "memory", "memory.memsw.usage_in_bytes"), "0\n")
	}
	return root
}

func TestV1Limits(t *testing.T) {
	root := fakeV1(t, true, controllersV1...)
	l := Limits{MemoryBytes: 64 << 20, PIDs: 32, VCPU: 2, IOReadBps: 1000, IOWriteBps: 2000, IODevices: []Device{{254, 0}}}
	g, err := newAt("v1", root, "/asb/run/step", l)
	if err != nil {
		t.Fatal(err)
	}
	var wantDirs []string
	for _, c := range controllersV1 {
		wantDirs = append(wantDirs, filepath.Join(root, c, "asb/run/step"))
	}
	if g.Version() != "v1" || !reflect.DeepEqual(g.Dirs(), wantDirs) {
		t.Errorf("version %s dirs %v, want %v", g.Version(), g.Dirs(), wantDirs)
	}
	want := map[string]string{
		"memory/asb/run/step/memory.limit_in_bytes":          "67108864",
		"memory/asb/run/step/memory.memsw.limit_in_bytes":    "67108864",
		"memory/asb/run/step/memory.kmem.tcp.limit_in_bytes": "67108864",
		"pids/asb/run/step/pids.max":                         "32",
		"cpu/asb/run/step/cpu.cfs_period_us":                 "100000",
		"cpu/asb/run/step/cpu.cfs_quota_us":                  "200000",
		"blkio/asb/run/step/blkio.throttle.read_bps_device":  "254:0 1000",
		"blkio/asb/run/step/blkio.throttle.write_bps_device": "254:0 2000",
	}
	for f, v := range want {
		if got := read(t, filepath.Join(root, f)); got != v {
			t.Errorf("%s = %q, want %q", f, got, v)
		}
	}
	if err := g.Add(77); err != nil {
		t.Fatal(err)
	}
	for _, d := range wantDirs {
		if got := read(t, filepath.Join(d, "cgroup.procs")); got != "77" {
			t.Errorf("%s/cgroup.procs = %q", d, got)
		}
	}
	if _, err := g.FD(); !errors.Is(err, ErrNoFD) {
		t.Errorf("FD on v1 = %v, want ErrNoFD", err)
	}
}

func TestV1NoSwapAccountingNoBlkio(t *testing.T) {
	root := fakeV1(t, false, "memory", "pids", "cpu", "cpuacct", "freezer")
	g, err := newAt("v1", root, "/asb/r/s", Limits{MemoryBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if exists(filepath.Join(root, "memory/asb/r/s/memory.memsw.limit_in_bytes")) {
		t.Error("wrote memsw where the kernel does not account swap")
	}
	if len(g.Dirs()) != 5 {
		t.Errorf("dirs = %v, want five without blkio", g.Dirs())
	}
	if _, err := newAt("v1", root, "/asb/r/t", Limits{IOReadBps: 1, IODevices: []Device{{8, 0}}}); err == nil || !strings.Contains(err.Error(), "blkio") {
		t.Errorf("io limit without blkio: %v", err)
	}
	bare := fakeV1(t, false, "memory", "pids", "cpu", "cpuacct")
	if _, err := newAt("v1", bare, "/asb/r/s", Limits{}); err == nil || !strings.Contains(err.Error(), "freezer") {
		t.Errorf("missing freezer: %v", err)
	}
}

func TestV1CoMountedCPU(t *testing.T) {
	root := fakeV1(t, false, "memory", "pids", "cpu,cpuacct", "freezer")
	for _, l := range []string{"cpu", "cpuacct"} {
		if err := os.Symlink("cpu,cpuacct", filepath.Join(root, l)); err != nil {
			t.Fatal(err)
		}
	}
	g, err := newAt("v1", root, "/asb/r/s", Limits{VCPU: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Dirs()) != 4 {
		t.Errorf("dirs = %v, want cpu and cpuacct to share one", g.Dirs())
	}
}

func TestV1Usage(t *testing.T) {
	root := fakeV1(t, false, "memory", "pids", "cpu", "cpuacct", "freezer")
	g, err := newAt("v1", root, "/asb/r/s", Limits{})
	if err != nil {
		t.Fatal(err)
	}
	d := func(c, f string) string { return filepath.Join(root, c, "asb/r/s", f) }
	write(t, d("memory", "memory.stat"), "cache 0\nrss 4096\n")
	write(t, d("memory", "memory.usage_in_bytes"), "4096\n")
	write(t, d("memory", "memory.max_usage_in_bytes"), "2097152\n")
	write(t, d("memory", "memory.limit_in_bytes"), "9223372036854771712\n")
	write(t, d("memory", "memory.failcnt"), "0\n")
	write(t, d("memory", "memory.oom_control"), "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n")
	write(t, d("cpuacct", "cpuacct.usage"), "123456789\n")
	write(t, d("cpuacct", "cpuacct.stat"), "user 10\nsystem 2\n")
	write(t, d("cpuacct", "cpuacct.usage_percpu"), "100000000 23456789\n")
	write(t, d("cpu", "cpu.stat"), "nr_periods 4\nnr_throttled 2\nthrottled_time 5000000\n")
	write(t, d("pids", "pids.current"), "4\n")
	write(t, d("pids", "pids.max"), "max\n")
	u, err := g.Usage()
	if err != nil {
		t.Fatal(err)
	}
	want := Usage{PeakMemoryBytes: 2 << 20, CPUTime: 123456789, PidsPeak: 4, OOMKills: 1, ThrottledTime: 5 * time.Millisecond, MemoryBytes: 4096, Pids: 4}
	if u != want {
		t.Errorf("usage = %+v, want %+v", u, want)
	}
	write(t, d("pids", "pids.peak"), "11\n")
	if u, _ = g.Usage(); u.PidsPeak != 11 {
		t.Errorf("pids peak = %d, want pids.peak 11", u.PidsPeak)
	}
}

func TestParseDevice(t *testing.T) {
	d, err := parseDevice("254:16")
	if err != nil || d != (Device{254, 16}) || d.String() != "254:16" {
		t.Errorf("parseDevice = %v, %v", d, err)
	}
	if _, err := parseDevice("vda"); err == nil {
		t.Error("parseDevice accepted a name")
	}
}

func TestV1KillDeleteList(t *testing.T) {
	root := fakeV1(t, false, "memory", "pids", "cpu", "cpuacct", "freezer")
	var groups []*Group
	for _, p := range []string{"/asb/r1/a", "/asb/r1/b"} {
		g, err := newAt("v1", root, p, Limits{PIDs: 8})
		if err != nil {
			t.Fatal(err)
		}
		g.rmdir = fakeRmdir
		groups = append(groups, g)
	}
	top, err := openAt("v1", root, "/asb")
	if err != nil {
		t.Fatal(err)
	}
	got, err := top.leaves()
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"/asb/r1/a", "/asb/r1/b"}; !reflect.DeepEqual(got, want) {
		t.Errorf("leaves = %v, want %v", got, want)
	}
	// Kill freezes and thaws through the library's freezer (the fake's
	// groups hold no processes, so nothing is signalled).
	if err := groups[0].Kill(); err != nil {
		t.Fatal(err)
	}
	if got := read(t, filepath.Join(root, "freezer/asb/r1/a/freezer.state")); got != "THAWED" {
		t.Errorf("freezer.state after Kill = %q, want THAWED", got)
	}
	if err := groups[0].Delete(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"memory", "pids", "cpu", "cpuacct", "freezer"} {
		if exists(filepath.Join(root, c, "asb/r1/a")) {
			t.Errorf("%s/asb/r1/a left after Delete", c)
		}
		if !exists(filepath.Join(root, c, "asb/r1/b")) {
			t.Errorf("Delete removed %s/asb/r1/b", c)
		}
	}
	// A handle opened by path, as gc does.
	if err := deleteByPathAt(t, root, "/asb/r1/b"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"memory", "pids", "cpu", "cpuacct", "freezer"} {
		if exists(filepath.Join(root, c, "asb")) {
			t.Errorf("%s/asb left after the last group was deleted", c)
		}
	}
	if err := groups[1].Delete(); err != nil {
		t.Errorf("Delete after DeleteByPath: %v", err)
	}
}

// deleteByPathAt is DeleteByPath on the v1 fake below root.
func deleteByPathAt(t *testing.T, root, p string) error {
	t.Helper()
	g, err := openAt("v1", root, p)
	if err != nil {
		return err
	}
	g.rmdir = fakeRmdir
	return g.Delete()
}

// fakeCmdline points the kernel command line at a file holding line.
func fakeCmdline(t *testing.T, line string) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "cmdline")
	write(t, p, line+"\n")
	old := cmdlineFile
	cmdlineFile = p
	t.Cleanup(func() { cmdlineFile = old })
}

// TestV1TCPBuffers: on v1 the kernel charges TCP socket buffers to a group
// only once memory.kmem.tcp.limit_in_bytes is written, so a memory limit
// writes it too, and New refuses where the kernel cannot charge them.
func TestV1TCPBuffers(t *testing.T) {
	fakeCmdline(t, "BOOT_IMAGE=/vmlinuz root=/dev/vda1 ro")
	root := fakeV1(t, false, "memory", "pids", "cpu", "cpuacct", "freezer")
	if _, err := newAt("v1", root, "/asb/r/s", Limits{MemoryBytes: 32 << 20}); err != nil {
		t.Fatal(err)
	}
	if got := read(t, filepath.Join(root, "memory/asb/r/s/memory.kmem.tcp.limit_in_bytes")); got != "33554432" {
		t.Errorf("memory.kmem.tcp.limit_in_bytes = %q, want the memory limit 33554432", got)
	}
	// No memory limit: nothing to charge against, nothing written.
	if _, err := newAt("v1", root, "/asb/r/n", Limits{PIDs: 4}); err != nil {
		t.Fatal(err)
	}
	if exists(filepath.Join(root, "memory/asb/r/n/memory.kmem.tcp.limit_in_bytes")) {
		t.Error("wrote a TCP limit without a memory limit")
	}

	// A kernel without the file (kmem.tcp is deprecated on v1).
	os.Remove(filepath.Join(root, "memory", "memory.kmem.tcp.limit_in_bytes"))
	_, err := newAt("v1", root, "/asb/r/t", Limits{MemoryBytes: 32 << 20})
	if err == nil || !strings.Contains(err.Error(), "memory.kmem.tcp.limit_in_bytes") || !strings.Contains(err.Error(), "TCP") {
		t.Errorf("v1 without kmem.tcp: %v, want an error naming the file", err)
	}
	if exists(filepath.Join(root, "memory/asb/r/t")) {
		t.Error("the refused group was created")
	}

	// Socket accounting switched off at boot.
	root = fakeV1(t, false, "memory", "pids", "cpu", "cpuacct", "freezer")
	fakeCmdline(t, "ro cgroup.memory=nokmem,nosocket quiet")
	if _, err := newAt("v1", root, "/asb/r/s", Limits{MemoryBytes: 32 << 20}); err == nil || !strings.Contains(err.Error(), "nosocket") {
		t.Errorf("v1 with cgroup.memory=nosocket: %v, want a refusal", err)
	}
}

// TestV2TCPBuffers: on v2 memory.max covers TCP socket buffers; nothing
// else is written, unless the kernel was booted without socket accounting.
func TestV2TCPBuffers(t *testing.T) {
	fakeCmdline(t, "ro cgroup.memory=nokmem quiet")
	mount := fakeV2(t, "cpu memory pids")
	fakeV2Parents(t, mount, "/asb/r/s")
	g, err := newAt("v2", mount, "/asb/r/s", Limits{MemoryBytes: 32 << 20})
	if err != nil {
		t.Fatal(err)
	}
	leaf := g.Dirs()[0]
	if got := read(t, filepath.Join(leaf, "memory.max")); got != "33554432" {
		t.Errorf("memory.max = %q", got)
	}
	ents, err := os.ReadDir(leaf)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.Contains(e.Name(), "kmem") || strings.Contains(e.Name(), "tcp") {
			t.Errorf("wrote %s on v2", e.Name())
		}
	}
	fakeCmdline(t, "cgroup.memory=nosocket")
	fakeV2Parents(t, mount, "/asb/r/t")
	if _, err := newAt("v2", mount, "/asb/r/t", Limits{MemoryBytes: 32 << 20}); err == nil || !strings.Contains(err.Error(), "nosocket") {
		t.Errorf("v2 with cgroup.memory=nosocket: %v, want a refusal", err)
	}
}
