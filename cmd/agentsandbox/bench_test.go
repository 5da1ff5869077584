package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/internal/testtier"
)

// The benchmarks here time whole processes of the real binary (builtCLI),
// beside baselines run in the same iterations, so that both see the same
// load. Figures and how to read them: docs/benchmarks.md.

const noopWorkflow = "apiVersion: agentsandbox.dev/v1\nkind: Workflow\nname: noop\nsteps:\n  - name: noop\n    run: \"true\"\n    resources: {timeout: 30s}\n"

// builtCLI builds ./cmd/agentsandbox static, as it ships, into a directory
// removed when tb ends, and returns its path. (A build per benchmark, not
// one per test process: a directory shared between them would outlive the
// process.) The jail's init is the agent AGENTSANDBOX_AGENT names, which
// TestMain builds and which the CLI's children inherit.
func builtCLI(tb testing.TB) string {
	tb.Helper()
	goCmd := testtier.Command(tb, "pure", "go", "the Go toolchain")
	bin := filepath.Join(tb.TempDir(), "agentsandbox")
	cmd := exec.Command(goCmd, "build", "-o", bin, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// timed runs argv and returns how long it took; a failure stops tb with
// the command's output.
func timed(tb testing.TB, argv ...string) time.Duration {
	tb.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	d := time.Since(start)
	if err != nil {
		tb.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out.String())
	}
	return d
}

func median(times []time.Duration) time.Duration {
	s := append([]time.Duration(nil), times...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func reportMedian(b *testing.B, times []time.Duration) {
	b.ReportMetric(ms(median(times)), "ms/median")
}

func writeBench(tb testing.TB, path, content string) string {
	tb.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		tb.Fatal(err)
	}
	return path
}

// BenchmarkApplyNoop times a whole `agentsandbox apply --isolation
// namespace` of a one-step no-op workflow as a process of the real binary
// (parse, policy, host probe, workspace, netns, cgroup, jail, record,
// exit), and in the same iterations two baselines: bwrap with the jail's
// namespaces (bwrapNoop) and `unshare -fpmniu true`. It reports each median and apply's ratio to them
// (targets: apply under 30 ms, under 10x bwrap).
func BenchmarkApplyNoop(b *testing.B) {
	testtier.Root(b)
	unshare := testtier.Command(b, "root", "unshare", "apt-get install util-linux")
	bwrap := testtier.Command(b, "root", "bwrap", "apt-get install bubblewrap; scripts/setup.sh installs it")
	asb := builtCLI(b)
	dir := b.TempDir()
	wf := writeBench(b, filepath.Join(dir, "noop.yaml"), noopWorkflow)
	state := filepath.Join(dir, "state")
	ws := filepath.Join(dir, "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		b.Fatal(err)
	}
	apply := []string{asb, "apply", "--isolation", "namespace", "--state-dir", state, wf}
	bw := bwrapNoop(bwrap, ws)
	un := []string{unshare, "-fpmniu", "true"}
	timed(b, apply...) // the first run creates the state directory
	var ta, tb, tu []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ta = append(ta, timed(b, apply...))
		tb = append(tb, timed(b, bw...))
		tu = append(tu, timed(b, un...))
	}
	b.StopTimer()
	ma, mb, mu := median(ta), median(tb), median(tu)
	b.ReportMetric(ms(ma), "apply-ms/median")
	b.ReportMetric(ms(mb), "bwrap-ms/median")
	b.ReportMetric(ms(mu), "unshare-ms/median")
	b.ReportMetric(float64(ma)/float64(mb), "x-bwrap")
	b.ReportMetric(float64(ma)/float64(mu), "x-unshare")
}

// BenchmarkApplyNoopInProcess is the same apply through Execute in this
// process: no process start, and the policy compiled once for all
// iterations (policy.Load's cache).
func BenchmarkApplyNoopInProcess(b *testing.B) {
	testtier.Root(b)
	dir := b.TempDir()
	wf := writeBench(b, filepath.Join(dir, "noop.yaml"), noopWorkflow)
	state := filepath.Join(dir, "state")
	times := make([]time.Duration, 0, b.N)
	for i := 0; i < b.N; i++ {
		start := time.Now()
		code := Execute(context.Background(), Stdio{In: strings.NewReader(""), Out: io.Discard, Err: io.Discard},
			[]string{"apply", "--isolation", "namespace", "--state-dir", state, wf})
		times = append(times, time.Since(start))
		if code != ExitOK {
			b.Fatalf("apply: exit %d", code)
		}
	}
	reportMedian(b, times)
}

// independentNoops is a workflow of n no-op steps that need nothing.
func independentNoops(n int) string {
	var sb strings.Builder
	sb.WriteString("apiVersion: agentsandbox.dev/v1\nkind: Workflow\nname: noops\nsteps:\n")
	for i := range n {
		fmt.Fprintf(&sb, "  - name: noop-%d\n    run: \"true\"\n    resources: {timeout: 30s}\n", i)
	}
	return sb.String()
}

// BenchmarkApply20Steps runs one apply of 20 independent no-op steps as a
// process and reports steps per second (target: 100 or more) at --jobs 2
// and --jobs 8. Any failed step fails the benchmark. In the same
// iterations it runs the baseline: the same 20 no-ops as bwrap processes
// (BenchmarkApplyNoop's command line), as many at a time as --jobs, which
// is the most a host can do with namespaces alone.
func BenchmarkApply20Steps(b *testing.B) {
	testtier.Root(b)
	bwrap := testtier.Command(b, "root", "bwrap", "apt-get install bubblewrap; scripts/setup.sh installs it")
	asb := builtCLI(b)
	dir := b.TempDir()
	wf := writeBench(b, filepath.Join(dir, "noops.yaml"), independentNoops(20))
	ws := filepath.Join(dir, "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		b.Fatal(err)
	}
	bw := bwrapNoop(bwrap, ws)
	for _, jobs := range []int{2, 8} {
		b.Run(fmt.Sprintf("jobs=%d", jobs), func(b *testing.B) {
			state := filepath.Join(dir, fmt.Sprintf("state-%d", jobs))
			var ta, tb []time.Duration
			for i := 0; i < b.N; i++ {
				ta = append(ta, timed(b, asb, "apply", "--isolation", "namespace", "--jobs", fmt.Sprint(jobs), "--state-dir", state, wf))
				tb = append(tb, timedParallel(b, 20, jobs, bw))
			}
			ma, mb := median(ta), median(tb)
			b.ReportMetric(ms(ma), "ms/median")
			b.ReportMetric(20/ma.Seconds(), "steps/s")
			b.ReportMetric(20/mb.Seconds(), "bwrap-steps/s")
		})
	}
}

// bwrapNoop is `true` under bwrap with the jail's namespaces (ipc, pid,
// net, uts, cgroup and mount; --unshare-all less the user namespace, which
// the jail does not use either and which a chroot refuses), read-only
// /usr, /proc, /dev, a tmpfs /tmp and ws bound at /workspace.
func bwrapNoop(bwrap, ws string) []string {
	return []string{bwrap, "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup",
		"--ro-bind", "/usr", "/usr",
		"--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
		"--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--bind", ws, "/workspace", "--chdir", "/workspace",
		"/usr/bin/true"}
}

// timedParallel runs argv n times, at most jobs at a time, and returns how
// long all of them took; any failure stops tb.
func timedParallel(tb testing.TB, n, jobs int, argv []string) time.Duration {
	tb.Helper()
	sem := make(chan struct{}, jobs)
	errs := make(chan error, n)
	start := time.Now()
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
				errs <- fmt.Errorf("%s: %v\n%s", strings.Join(argv, " "), err, out)
			}
		}()
	}
	wg.Wait()
	d := time.Since(start)
	close(errs)
	for err := range errs {
		tb.Fatal(err)
	}
	return d
}

// TestConcurrentApplies starts 10 apply processes of the real binary at
// once, sharing one state directory: every one must succeed, and each
// leaves its own record.
func TestConcurrentApplies(t *testing.T) {
	testtier.Root(t)
	asb := builtCLI(t)
	dir := t.TempDir()
	wf := writeBench(t, filepath.Join(dir, "noop.yaml"), noopWorkflow)
	state := filepath.Join(dir, "state")
	const n = 10
	errs := make([]error, n)
	outs := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := exec.Command(asb, "apply", "--isolation", "namespace", "--state-dir", state, wf).CombinedOutput()
			errs[i], outs[i] = err, string(out)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("apply %d of %d: %v\n%s", i+1, n, err, outs[i])
		}
	}
	ents, err := os.ReadDir(filepath.Join(state, "records"))
	if err != nil {
		t.Fatal(err)
	}
	records := 0
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".json") && !strings.HasPrefix(e.Name(), ".") {
			records++
		}
	}
	if records != n {
		t.Errorf("%d records after %d applies", records, n)
	}
}

// genLargeWorkflow is a workflow of n steps with packages, env, outputs,
// resources and needs (like workflow's BenchmarkParse1000), that the
// default policy admits under namespace isolation.
func genLargeWorkflow(n int) string {
	var b strings.Builder
	b.WriteString("apiVersion: agentsandbox.dev/v1\nkind: Workflow\nname: big\n")
	b.WriteString("nixpkgs: github:NixOS/nixpkgs/8f3e1f807051e32d8c95cd12b9b421623850a34d\n")
	b.WriteString("defaults:\n  resources: {memory: 1GiB, timeout: 10m}\n  env: {COMMON: \"1\"}\n")
	b.WriteString("inputs:\n  data: {source: https://example.com/d.csv, sha256: " + strings.Repeat("ab", 32) + "}\n")
	b.WriteString("steps:\n")
	for i := range n {
		fmt.Fprintf(&b, "  - name: step-%d\n    run: |\n      echo step %d\n      echo done > out/%d\n", i, i, i)
		fmt.Fprintf(&b, "    packages: [python3, python3Packages.numpy]\n    outputs: [out/%d]\n", i)
		fmt.Fprintf(&b, "    env: {STEP: \"%d\"}\n", i)
		fmt.Fprintf(&b, "    resources: {vcpu: %d, pids: 128}\n", 1+i%4)
		if i%10 == 0 {
			b.WriteString("    inputs: [data]\n")
		}
		if i > 0 {
			fmt.Fprintf(&b, "    needs: [step-%d, step-%d, step-%d]\n", i-1, i/2, i/3)
		}
	}
	return b.String()
}

// BenchmarkValidateRender1000 times `validate` and `render` of a 1,000-step
// workflow as processes of the real binary, beside two process-start
// floors in the same iterations: `agentsandbox version` (this binary's
// start alone) and a static Go program that prints one line (any Go
// process's start on this host). Targets: validate under 80 ms, render
// under 150 ms.
func BenchmarkValidateRender1000(b *testing.B) {
	asb := builtCLI(b)
	hello := builtHello(b)
	dir := b.TempDir()
	wf := writeBench(b, filepath.Join(dir, "big.yaml"), genLargeWorkflow(1000))
	var tv, tr, tver, thello []time.Duration
	for i := 0; i < b.N; i++ {
		thello = append(thello, timed(b, hello))
		tver = append(tver, timed(b, asb, "version"))
		tv = append(tv, timed(b, asb, "validate", wf))
		out := filepath.Join(dir, fmt.Sprintf("render-%d", i))
		tr = append(tr, timed(b, asb, "render", "-o", out, wf))
		os.RemoveAll(out)
	}
	b.ReportMetric(ms(median(tv)), "validate-ms/median")
	b.ReportMetric(ms(median(tr)), "render-ms/median")
	b.ReportMetric(ms(median(tver)), "version-ms/median")
	b.ReportMetric(ms(median(thello)), "go-hello-ms/median")
}

// builtHello builds a static Go program that prints one line: the floor
// of any Go process's start on this host.
func builtHello(tb testing.TB) string {
	tb.Helper()
	goCmd := testtier.Command(tb, "pure", "go", "the Go toolchain")
	dir := tb.TempDir()
	writeBench(tb, filepath.Join(dir, "go.mod"), "module hello\n\ngo 1.22\n")
	writeBench(tb, filepath.Join(dir, "main.go"), "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"hello\") }\n")
	bin := filepath.Join(dir, "hello")
	cmd := exec.Command(goCmd, "build", "-o", bin, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("go build hello: %v\n%s", err, out)
	}
	return bin
}

// BenchmarkRerunPipeline times `rerun` of a record of examples/pipeline.yaml
// beside an `apply` of the same workflow in the same iterations, both as
// processes of the real binary (namespace isolation): what a rerun adds
// (the stored workflow and inputs, the comparison of every output) over
// the run itself.
func BenchmarkRerunPipeline(b *testing.B) {
	testtier.Root(b)
	asb := builtCLI(b)
	state := filepath.Join(b.TempDir(), "state")
	wf, err := filepath.Abs("../../examples/pipeline.yaml")
	if err != nil {
		b.Fatal(err)
	}
	apply := []string{asb, "apply", "--isolation", "namespace", "--state-dir", state, wf}
	out, err := exec.Command(apply[0], apply[1:]...).Output()
	if err != nil {
		b.Fatalf("apply: %v\n%s", err, out)
	}
	lines := strings.Fields(string(out))
	id := lines[len(lines)-1]
	rerun := []string{asb, "rerun", "--state-dir", state, id}
	var ta, tr []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ta = append(ta, timed(b, apply...))
		tr = append(tr, timed(b, rerun...))
	}
	b.StopTimer()
	b.ReportMetric(ms(median(ta)), "apply-ms/median")
	b.ReportMetric(ms(median(tr)), "rerun-ms/median")
	b.ReportMetric(float64(median(tr))/float64(median(ta)), "x-apply")
}

// BenchmarkHostPageFault reports what one page fault costs on this host:
// 64 MiB of fresh anonymous memory touched a page at a time. Every new
// process pays it for each page it touches (its heap, stacks, data and
// the text it runs), so it sets the floor under the process-start figures
// of the benchmarks above (docs/benchmarks.md, "The host's floor").
func BenchmarkHostPageFault(b *testing.B) {
	const size = 64 << 20
	page := os.Getpagesize()
	var total time.Duration
	for i := 0; i < b.N; i++ {
		mem, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		for off := 0; off < size; off += page {
			mem[off] = 1
		}
		total += time.Since(start)
		if err := syscall.Munmap(mem); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(total.Nanoseconds())/1000/float64(b.N*size/page), "us/fault")
}
