package sandboxes

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/netns"
	"github.com/agentsandbox/agentsandbox/policy"
)

// waitWarm waits until the pool holds ready sandboxes (bounded by a
// deadline, not a timing assertion: a loaded host opens them slowly).
func waitWarm(t testing.TB, m *manager, ready int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for m.warmStats().Ready < ready {
		if time.Now().After(deadline) {
			t.Fatalf("the warm pool has %+v after 2 minutes, want %d ready", m.warmStats(), ready)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// warmIDs are the ids of the ready warm sandboxes and the bundle digest
// that admitted the first.
func warmIDs(m *manager) ([]string, policy.Digest) {
	p := m.warm[0]
	p.mu.Lock()
	defer p.mu.Unlock()
	var ids []string
	for _, wb := range p.ready {
		ids = append(ids, wb.id)
	}
	var d policy.Digest
	if len(p.ready) > 0 {
		d = p.ready[0].bundle
	}
	return ids, d
}

// TestWarmPool: a create of the default spec takes a warm sandbox that
// works like any other (exec, its record), the pool opens the next one,
// a create of another spec is opened as before, a policy reload replaces
// the warm sandboxes, and Close leaves nothing behind: no netns, no run
// directory, and no record for a warm sandbox nobody took.
func TestWarmPool(t *testing.T) {
	before, _ := netns.List(netns.Prefix)
	mi, store := newManager(t, Options{Warm: []WarmSpec{{N: 1}}, ReapEvery: 50 * time.Millisecond})
	m := mi.(*manager)
	ctx := context.Background()
	waitWarm(t, m, 1)
	ready, _ := warmIDs(m)
	warmID := ready[0]
	seen := []string{warmID} // every sandbox id, for the leftovers check

	info, err := m.Create(ctx, Spec{Labels: map[string]string{"who": "test"}})
	if err != nil {
		t.Fatal(err)
	}
	if info.ID != warmID || m.warmStats().Hits != 1 {
		t.Fatalf("create of the default spec got %s (stats %+v), want the warm %s", info.ID, m.warmStats(), warmID)
	}
	if info.State != StateRunning || info.Labels["who"] != "test" || time.Until(info.ExpiresAt) < 50*time.Minute {
		t.Errorf("info: %+v", info)
	}
	if out, _, x := collect(t, m, info.ID, ExecRequest{Argv: []string{"sh", "-c", "echo hi > f; cat f; id -u"}}); out != "hi\n65534\n" || x.Exit == nil || x.Exit.ExitCode != 0 {
		t.Fatalf("exec in the warm sandbox: %q %+v", out, x)
	}
	waitWarm(t, m, 1) // the next one
	ready, _ = warmIDs(m)
	next := ready[0]
	seen = append(seen, next)
	if next == info.ID {
		t.Fatal("the pool handed out the same sandbox twice")
	}

	// Another spec makes another workflow: opened, not taken.
	other, err := m.Create(ctx, Spec{Env: map[string]string{"A": "1"}})
	if err != nil {
		t.Fatal(err)
	}
	seen = append(seen, other.ID)
	if other.ID == next || m.warmStats().Ready != 1 {
		t.Fatalf("a create with env took the warm sandbox: %+v, %+v", other, m.warmStats())
	}
	if out, _, _ := collect(t, m, other.ID, ExecRequest{Argv: []string{"sh", "-c", "echo $A"}}); out != "1\n" {
		t.Errorf("the other spec's env: %q", out)
	}
	// An explicit default is the default spec.
	explicit, err := m.Create(ctx, Spec{Isolation: "namespace"})
	if err != nil {
		t.Fatal(err)
	}
	if explicit.ID != next {
		t.Errorf("isolation namespace (the default) did not take the warm sandbox")
	}
	waitWarm(t, m, 1)

	// A reloaded policy (another bundle) replaces the warm sandbox that
	// the old one admitted.
	ready, _ = warmIDs(m)
	stale := ready[0]
	seen = append(seen, stale)
	data := filepath.Join(t.TempDir(), "data.json")
	if err := os.WriteFile(data, []byte(`{"agentsandbox": {"reloaded": true}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	pol, err := policy.Load(ctx, policy.Options{DataFiles: []string{data}})
	if err != nil {
		t.Fatal(err)
	}
	m.SetPolicy(pol)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		st := m.warmStats()
		if ids, d := warmIDs(m); st.Ready == 1 && d == pol.BundleDigest() {
			seen = append(seen, ids...)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no warm sandbox under the reloaded policy: %+v", st)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := os.Stat(filepath.Join(store.Dir(), "runs", stale)); !os.IsNotExist(err) {
		t.Errorf("the stale warm sandbox's directory is still there: %v", err)
	}
	reloaded, err := m.Create(ctx, Spec{})
	if err != nil {
		t.Fatal(err)
	}
	seen = append(seen, reloaded.ID)
	b, _ := m.box(ctx, reloaded.ID)
	if b.sb.Decision.BundleDigest != pol.BundleDigest() {
		t.Errorf("the sandbox handed out after the reload was admitted by %s, not %s", b.sb.Decision.BundleDigest, pol.BundleDigest())
	}
	waitWarm(t, m, 1)
	ready, _ = warmIDs(m)
	seen = append(seen, ready...)

	// Close: four records (the sandboxes created), none for the warm one
	// nobody took, and nothing left on the host.
	if err := m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	ids, err := store.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != 4 {
		t.Errorf("%d records after 4 sandboxes, want 4 (none for a warm sandbox never taken)", len(ids))
	}
	after, _ := netns.List(netns.Prefix)
	for _, n := range after {
		for _, id := range seen {
			if !contains(before, n) && strings.Contains(n, id[:8]) {
				t.Errorf("namespace left: %s (sandbox %s)", n, id)
			}
		}
	}
	if entries, _ := os.ReadDir(filepath.Join(store.Dir(), "runs")); len(entries) != 0 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("sandbox directories left: %s", strings.Join(names, " "))
	}
}

// BenchmarkCreate times Create of the default spec (what POST
// /v1/sandboxes '{}' costs without HTTP) with no pool ("cold": admission,
// workspace, netns, cgroup, jail) beside the same with a warm pool of one
// ("warm": the pool refilled before each timed create). Kills are not
// timed.
//
//	CI=true go test -run '^$' -bench BenchmarkCreate -benchtime 30x ./sandboxes
func BenchmarkCreate(b *testing.B) {
	for _, warm := range []int{0, 1} {
		name := map[int]string{0: "cold", 1: "warm"}[warm]
		b.Run(name, func(b *testing.B) {
			var ws []WarmSpec
			if warm > 0 {
				ws = []WarmSpec{{N: warm}}
			}
			mi, _ := newManager(b, Options{Warm: ws})
			m := mi.(*manager)
			ctx := context.Background()
			var times []time.Duration
			for i := 0; i < b.N; i++ {
				if warm > 0 {
					waitWarm(b, m, warm)
				}
				start := time.Now()
				info, err := m.Create(ctx, Spec{})
				times = append(times, time.Since(start))
				if err != nil {
					b.Fatal(err)
				}
				if _, err := m.Kill(ctx, info.ID); err != nil {
					b.Fatal(err)
				}
			}
			slices.Sort(times)
			b.ReportMetric(float64(times[len(times)/2].Microseconds())/1000, "create-ms/median")
			b.ReportMetric(float64(times[len(times)*9/10].Microseconds())/1000, "create-ms/p90")
			if warm > 0 && m.warmStats().Hits != b.N {
				b.Fatalf("%d of %d creates came from the pool", m.warmStats().Hits, b.N)
			}
		})
	}
}

// A warm sandbox whose init ended while it waited (killed, out of memory)
// is not handed out: the create gets a working sandbox, and the pool
// opens a live one in its place.
func TestWarmPoolSkipsDead(t *testing.T) {
	mi, _ := newManager(t, Options{Warm: []WarmSpec{{N: 1}}})
	m := mi.(*manager)
	ctx := context.Background()
	waitWarm(t, m, 1)
	m.warm[0].mu.Lock()
	dead := m.warm[0].ready[0]
	m.warm[0].mu.Unlock()
	if err := dead.sb.Session.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-dead.sb.Session.Done():
	case <-time.After(time.Minute):
		t.Fatal("the stopped session is not done")
	}
	info, err := m.Create(ctx, Spec{})
	if err != nil {
		t.Fatal(err)
	}
	if info.ID == dead.id {
		t.Fatal("a dead warm sandbox was handed out")
	}
	if out, _, _ := collect(t, m, info.ID, ExecRequest{Argv: []string{"echo", "alive"}}); out != "alive\n" {
		t.Fatalf("exec: %q", out)
	}
	waitWarm(t, m, 1)
	ids, _ := warmIDs(m)
	if ids[0] == dead.id {
		t.Error("the dead warm sandbox is still in the pool")
	}
}

// A pool of a template: a create of that template takes its warm
// sandbox; once the template file is edited the warm sandbox (of the old
// step) is not handed out, and the pool opens one of the new step.
func TestWarmPoolTemplate(t *testing.T) {
	dir := t.TempDir()
	tmpl := filepath.Join(dir, "ci.yaml")
	write := func(x string) {
		wf := "apiVersion: agentsandbox.dev/v1\nkind: Workflow\nname: ci\nsteps:\n  - name: test\n    run: make test\n    env: {X: \"" + x + "\"}\n"
		if err := os.WriteFile(tmpl, []byte(wf), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("1")
	spec := Spec{Template: "ci.yaml#test"}
	mi, _ := newManager(t, Options{TemplateDir: dir, Warm: []WarmSpec{{Spec: spec, N: 1}}})
	m := mi.(*manager)
	ctx := context.Background()
	waitWarm(t, m, 1)
	first, _ := warmIDs(m)

	info, err := m.Create(ctx, Spec{Template: "ci.yaml#test", Labels: map[string]string{"run": "1"}})
	if err != nil {
		t.Fatal(err)
	}
	if info.ID != first[0] {
		t.Fatalf("a create of the template did not take its warm sandbox (%+v)", m.warmStats())
	}
	if out, _, _ := collect(t, m, info.ID, ExecRequest{Shell: "echo $X"}); out != "1\n" {
		t.Fatalf("the template's env in the warm sandbox: %q", out)
	}
	plain, err := m.Create(ctx, Spec{})
	if err != nil {
		t.Fatal(err)
	}
	waitWarm(t, m, 1)
	stale, _ := warmIDs(m)
	if plain.ID == stale[0] {
		t.Fatal("the default spec took the template's warm sandbox")
	}

	write("2")
	edited, err := m.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if edited.ID == stale[0] {
		t.Fatal("a warm sandbox of the template before its edit was handed out")
	}
	if out, _, _ := collect(t, m, edited.ID, ExecRequest{Shell: "echo $X"}); out != "2\n" {
		t.Fatalf("after the edit: %q", out)
	}
	waitWarm(t, m, 1)
	again, err := m.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if out, _, _ := collect(t, m, again.ID, ExecRequest{Shell: "echo $X"}); out != "2\n" || m.warmStats().Hits != 2 {
		t.Fatalf("the refilled pool: %q, %+v", out, m.warmStats())
	}
}

// sandboxDirs counts the sandboxes on the host: the directories of the
// manager's run root, one per jail however it is held (box, warm, being
// opened or discarded).
func sandboxDirs(t *testing.T, m *manager) int {
	t.Helper()
	entries, err := os.ReadDir(m.o.Engine.RunRoot)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return len(entries)
}

// TestWarmCountsAgainstMaxSandboxes: with MaxSandboxes 3 and a warm pool
// of 2, one create of another spec fits and the next is refused (three
// such creates used to succeed: five jails on a server of three); a
// create of the pool's spec takes a warm one and the pool does not refill
// past the limit; a kill makes room, which the pool takes back.
func TestWarmCountsAgainstMaxSandboxes(t *testing.T) {
	mi, _ := newManager(t, Options{MaxSandboxes: 3, Warm: []WarmSpec{{N: 2}}, ReapEvery: 50 * time.Millisecond})
	m := mi.(*manager)
	ctx := context.Background()
	waitWarm(t, m, 2)
	other := Spec{Env: map[string]string{"A": "1"}}
	first, err := m.Create(ctx, other)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Create(ctx, other); CodeOf(err) != CodeLimit || !strings.Contains(err.Error(), "holds 3 sandboxes (1 running, 2 warm)") {
		t.Fatalf("a create past running 1 + warm 2 of 3: %v, want %s", err, CodeLimit)
	}
	if n := sandboxDirs(t, m); n != 3 {
		t.Errorf("%d sandboxes on the host, want 3", n)
	}
	// The pool's own spec takes a warm sandbox: its place is the box's.
	taken, err := m.Create(ctx, Spec{})
	if err != nil {
		t.Fatal(err)
	}
	if st := m.warmStats(); st.Hits != 1 || st.Ready != 1 {
		t.Fatalf("create of the default spec: %+v", st)
	}
	time.Sleep(300 * time.Millisecond) // the filler was poked: it must find no room
	m.mu.Lock()
	inUse := m.inUse()
	m.mu.Unlock()
	if st := m.warmStats(); st.Ready != 1 || inUse != 3 || sandboxDirs(t, m) != 3 {
		t.Fatalf("the pool refilled past the limit: %+v, %d in use, %d on the host", st, inUse, sandboxDirs(t, m))
	}
	if _, err := m.Create(ctx, other); CodeOf(err) != CodeLimit {
		t.Fatalf("a create with 2 running and 1 warm of 3: %v", err)
	}
	// A kill frees a place; the pool, short by one, takes it.
	if _, err := m.Kill(ctx, first.ID); err != nil {
		t.Fatal(err)
	}
	waitWarm(t, m, 2)
	if _, err := m.Create(ctx, other); CodeOf(err) != CodeLimit {
		t.Fatalf("a create with 1 running and 2 warm of 3: %v", err)
	}
	if n := sandboxDirs(t, m); n > 3 {
		t.Errorf("%d sandboxes on the host, over 3", n)
	}
	if out, _, _ := collect(t, m, taken.ID, ExecRequest{Argv: []string{"echo", "ok"}}); out != "ok\n" {
		t.Errorf("exec in the warm-taken sandbox: %q", out)
	}
}
