package inputs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/agentsandbox/agentsandbox/workflow"
)

// apiConfinement is the default policy's confinement, with allow opening
// special addresses and deny forbidding destinations.
func apiConfinement(t *testing.T, fromStore bool, allow, deny []string) *Confinement {
	t.Helper()
	c, err := NewConfinement([]string{"http", "https"}, fromStore, allow, deny)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// fakeNet stands in for the internet of a confined fetch: made-up public
// addresses are routed to servers the test runs on loopback, names resolve
// as the test says, and every dial is recorded. An address with no route
// is dialled for real, so a fetch that dials what it should not reaches
// the test's victim and the test sees it.
type fakeNet struct {
	mu       sync.Mutex
	names    map[string][]netip.Addr
	flip     map[string][]netip.Addr // a name's answer from its second lookup on
	looked   map[string]int
	routes   map[string]string // "203.0.113.10:80" -> a loopback server's address
	dials    []string
	resolves int
}

func newFakeNet() *fakeNet {
	return &fakeNet{names: map[string][]netip.Addr{}, flip: map[string][]netip.Addr{}, looked: map[string]int{}, routes: map[string]string{}}
}

func (n *fakeNet) resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.resolves++
	n.looked[host]++
	if as, ok := n.flip[host]; ok && n.looked[host] > 1 {
		return as, nil
	}
	if as, ok := n.names[host]; ok {
		return as, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func (n *fakeNet) dial(ctx context.Context, network, address string) (net.Conn, error) {
	n.mu.Lock()
	n.dials = append(n.dials, address)
	to, ok := n.routes[address]
	n.mu.Unlock()
	if !ok {
		to = address
	}
	return (&net.Dialer{}).DialContext(ctx, network, to)
}

func (n *fakeNet) dialled() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.dials)
}

// route makes the made-up address:port reach srv.
func (n *fakeNet) route(public string, srv *httptest.Server) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.routes[public] = srv.Listener.Addr().String()
}

func confinedFetcher(t *testing.T, c *Confinement, n *fakeNet) *Fetcher {
	f := newFetcher(t)
	f.Confine = c
	if n != nil {
		f.Resolve, f.Dial = n.resolve, n.dial
	}
	return f
}

// TestConfinedStoreNotServed: an API caller's input is never served from
// the store by its pin. A missing file pinned to a stored blob's digest
// (another run's stdout, say) fails exactly as when the store lacks it; an
// existing file pinned to it is read and does not match; an http input is
// downloaded; a git commit whose tree is stored is fetched again. Only a
// confinement whose Owns accepts the digest, or the operator's own fetch,
// gets the stored copy.
func TestConfinedStoreNotServed(t *testing.T) {
	secret := []byte("another sandbox's stdout: the token is hunter2\n")
	base := t.TempDir()
	writeFile(t, filepath.Join(base, "exists.txt"), []byte("a template file"))
	ctx := context.Background()

	holding := confinedFetcher(t, apiConfinement(t, false, nil, nil), nil)
	d, _, err := holding.Store.PutBlob(bytes.NewReader(secret))
	if err != nil {
		t.Fatal(err)
	}
	lacking := confinedFetcher(t, apiConfinement(t, false, nil, nil), nil)

	missing := workflow.Input{Name: "leak", Kind: workflow.InputFile, Source: "no-such-file.txt", SHA256: d.Hex()}
	ws := t.TempDir()
	_, errHeld := holding.Fetch(ctx, missing, base, filepath.Join(ws, "held"))
	_, errLacked := lacking.Fetch(ctx, missing, base, filepath.Join(ws, "lacked"))
	if !errors.Is(errHeld, ErrNoSource) || errHeld.Error() != errLacked.Error() {
		t.Fatalf("missing source pinned to a stored blob: %v\nthe same without the blob: %v\nwant the same ErrNoSource", errHeld, errLacked)
	}
	t.Logf("missing source: %v", errHeld)
	for _, p := range []string{"held", "lacked"} {
		if _, err := os.Lstat(filepath.Join(ws, p)); err == nil {
			t.Errorf("%s: something was placed", p)
		}
	}

	existing := workflow.Input{Name: "leak", Kind: workflow.InputFile, Source: "exists.txt", SHA256: d.Hex()}
	_, err = holding.Fetch(ctx, existing, base, filepath.Join(ws, "existing"))
	if !errors.Is(err, ErrChecksum) || strings.Contains(err.Error(), sum([]byte("a template file"))) {
		t.Fatalf("existing file pinned to a stored blob: %v; want a checksum mismatch that does not show the file's digest", err)
	}

	n := newFakeNet()
	other := []byte("what the URL serves")
	srv, hits := server(t, map[string][]byte{"/x": other})
	n.names["files.example.test"] = []netip.Addr{netip.MustParseAddr("203.0.113.10")}
	n.route("203.0.113.10:80", srv)
	holding.Resolve, holding.Dial = n.resolve, n.dial
	web := workflow.Input{Name: "leak", Kind: workflow.InputHTTP, Source: "http://files.example.test/x", SHA256: d.Hex()}
	_, err = holding.Fetch(ctx, web, base, filepath.Join(ws, "web"))
	if !errors.Is(err, ErrChecksum) || hits.Load() != 1 || strings.Contains(err.Error(), sum(other)) {
		t.Fatalf("http input pinned to a stored blob: %v (%d requests); want it downloaded and a mismatch without the download's digest", err, hits.Load())
	}

	// Those who own it get it: an Owns that says so, and the operator.
	owner := *holding
	owner.Confine = apiConfinement(t, true, nil, nil)
	if got, err := owner.Fetch(ctx, missing, base, filepath.Join(ws, "owned")); err != nil || !got.Cached {
		t.Fatalf("with api_inputs.from_store: %+v, %v; want the stored blob", got, err)
	}
	operator := *holding
	operator.Confine = nil
	if got, err := operator.Fetch(ctx, missing, base, filepath.Join(ws, "operator")); err != nil || !got.Cached {
		t.Fatalf("the operator's own workflow: %+v, %v; want the stored blob", got, err)
	}
}

// TestConfinedGitRefNotServed: a commit whose tree the store holds (from
// the operator's private repository, say) is fetched from the caller's
// source again, not served by the commit alone; a confined fetch records
// no commit-to-tree ref for others either.
func TestConfinedGitRefNotServed(t *testing.T) {
	testtierCommand(t, "git")
	f := confinedFetcher(t, apiConfinement(t, false, nil, nil), newFakeNet())
	tree := t.TempDir()
	writeFile(t, filepath.Join(tree, "private.txt"), []byte("the operator's code"))
	h, _, err := f.Store.PutNAR(tree)
	if err != nil {
		t.Fatal(err)
	}
	commit := strings.Repeat("ab", 20)
	if err := f.Store.PutRef("git", commit, h.Blob()); err != nil {
		t.Fatal(err)
	}
	in := workflow.Input{Name: "code", Kind: workflow.InputGit, Source: "git::https://nowhere.example.test/repo.git", Commit: commit}
	got, err := f.Fetch(context.Background(), in, "", filepath.Join(t.TempDir(), "code"))
	if err == nil || got.Cached {
		t.Fatalf("confined fetch of a stored commit: %+v, %v; want a fetch from the source (which fails here)", got, err)
	}
	t.Logf("stored commit, unreachable source: %v", err)
}

// TestConfinedCheck: the kinds and schemes an API caller may use, and
// addresses written in a URL, are judged before anything is fetched.
func TestConfinedCheck(t *testing.T) {
	c := apiConfinement(t, false, nil, []string{"*.corp.example.test"})
	for _, cc := range []struct {
		source string
		kind   workflow.InputKind
		want   string // "" for allowed
	}{
		{"data/x.csv", workflow.InputFile, ""},
		{"git::https://example.test/r.git", workflow.InputGit, ""},
		{"git::http://example.test/r.git", workflow.InputGit, ""},
		{"git::file:///srv/private/repo", workflow.InputGit, `uses file`},
		{"git::ssh://git@example.test/r.git", workflow.InputGit, `uses ssh`},
		{"git::git@example.test:r.git", workflow.InputGit, `uses ssh`},
		{"git::git://example.test/r.git", workflow.InputGit, `uses git`},
		{"git::https://127.0.0.1/r.git", workflow.InputGit, "loopback"},
		{"https://example.test/x", workflow.InputHTTP, ""},
		{"http://127.0.0.1:8080/x", workflow.InputHTTP, "127.0.0.1 is a loopback address"},
		{"http://[::1]/x", workflow.InputHTTP, "loopback"},
		{"http://[::ffff:127.0.0.1]/x", workflow.InputHTTP, "loopback"},
		{"http://[fe80::1%25eth0]/x", workflow.InputHTTP, "link-local"},
		{"http://0.0.0.0/x", workflow.InputHTTP, "unspecified"},
		{"http://169.254.169.254/latest/meta-data/", workflow.InputHTTP, "link-local"},
		{"http://10.1.2.3/x", workflow.InputHTTP, "private"},
		{"https://git.corp.example.test/x", workflow.InputHTTP, "egress_deny"},
	} {
		err := c.Check(workflow.Input{Name: "in", Kind: cc.kind, Source: cc.source})
		switch {
		case cc.want == "" && err != nil:
			t.Errorf("%s: %v, want it allowed", cc.source, err)
		case cc.want != "" && (!errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), cc.want) || !strings.HasPrefix(err.Error(), `input "in": `)):
			t.Errorf("%s: %v, want ErrRefused naming the input and %q", cc.source, err, cc.want)
		}
	}
	err := c.Check(workflow.Input{Name: "in", Kind: workflow.InputGit, Source: "git::file:///srv/repo"})
	if !strings.Contains(err.Error(), "data.agentsandbox.api_inputs.git_schemes") {
		t.Errorf("git refusal %q does not name the policy key", err)
	}
	err = c.Check(workflow.Input{Name: "in", Kind: workflow.InputHTTP, Source: "http://127.0.0.1/x"})
	if !strings.Contains(err.Error(), "data.agentsandbox.api_inputs.network_allow") {
		t.Errorf("address refusal %q does not name the policy key", err)
	}
	wide, err := NewConfinement([]string{"file", "https"}, false, []string{"127.0.0.1/32:8080"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, ok := range []string{"git::file:///srv/repo", "http://127.0.0.1:8080/x"} {
		kind := workflow.InputGit
		if !strings.HasPrefix(ok, "git::") {
			kind = workflow.InputHTTP
		}
		if err := wide.Check(workflow.Input{Name: "in", Kind: kind, Source: ok}); err != nil {
			t.Errorf("widened: %s: %v", ok, err)
		}
	}
	if err := wide.Check(workflow.Input{Name: "in", Kind: workflow.InputHTTP, Source: "http://127.0.0.1:8081/x"}); !errors.Is(err, ErrRefused) {
		t.Errorf("widened to port 8080 only: port 8081: %v", err)
	}
	if err := wide.Check(workflow.Input{Name: "in", Kind: workflow.InputGit, Source: "git::http://example.test/r.git"}); !errors.Is(err, ErrRefused) {
		t.Errorf("git_schemes without http: %v", err)
	}
	if err := (*Confinement)(nil).Check(workflow.Input{Name: "in", Kind: workflow.InputGit, Source: "git::file:///srv/repo"}); err != nil {
		t.Errorf("no confinement (the operator's workflow): %v", err)
	}
}

// TestConfinedHTTPAddresses: a confined http input dials only addresses
// the policy accepts, judged after resolution, for every connection
// (redirects too), and always as the literal it judged, so a name that
// resolves elsewhere the next time (DNS rebinding) cannot lead a checked
// fetch to a refused address. What was refused is never requested, and
// no error shows the digest of what a refused address would have served.
func TestConfinedHTTPAddresses(t *testing.T) {
	ctx := context.Background()
	secretBody := []byte("metadata credentials")
	victim, victimHits := server(t, map[string][]byte{"/secret": secretBody})
	_, victimPort, _ := net.SplitHostPort(victim.Listener.Addr().String())
	good := []byte("public data")
	var redirectTo atomic.Value
	public := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/data":
			w.Write(good)
		case "/redirect":
			http.Redirect(w, r, redirectTo.Load().(string), http.StatusFound)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(public.Close)
	n := newFakeNet()
	pub := netip.MustParseAddr("203.0.113.10")
	n.names["public.example.test"] = []netip.Addr{pub}
	n.names["both.example.test"] = []netip.Addr{netip.MustParseAddr("127.0.0.1"), pub}
	n.names["internal.example.test"] = []netip.Addr{netip.MustParseAddr("10.0.0.5")}
	n.names["meta.example.test"] = []netip.Addr{netip.MustParseAddr("169.254.169.254")}
	n.names["loop.example.test"] = []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("::1")}
	n.names["flip.example.test"] = []netip.Addr{pub}
	n.flip["flip.example.test"] = []netip.Addr{netip.MustParseAddr("127.0.0.1")}
	n.route("203.0.113.10:80", public)
	f := confinedFetcher(t, apiConfinement(t, false, nil, nil), n)
	ws := t.TempDir()
	fetch := func(f *Fetcher, name, source string, pin []byte) (Fetched, error) {
		return f.Fetch(ctx, workflow.Input{Name: name, Kind: workflow.InputHTTP, Source: source, SHA256: sum(pin)}, "", filepath.Join(ws, name))
	}

	got, err := fetch(f, "public", "http://public.example.test/data", good)
	if err != nil {
		t.Fatalf("a public address: %v", err)
	}
	if b, _ := os.ReadFile(got.Path); !bytes.Equal(b, good) {
		t.Fatalf("a public address gave %q", b)
	}
	// A name with a refused address and a public one: the public one.
	if _, err := fetch(f, "both", "http://both.example.test/data", good); err != nil {
		t.Fatalf("a name with a loopback and a public address: %v", err)
	}

	wrong := []byte("a guess")
	// A name's refusal does not say what it resolved to: the server's
	// resolver is no lookup service for the caller.
	const byName = "resolves only to addresses an API caller's inputs may not come from"
	for _, c := range []struct{ name, source, want string }{
		{"literal", "http://127.0.0.1:" + victimPort + "/secret", "127.0.0.1 is a loopback address"},
		{"localhost", "http://localhost:" + victimPort + "/secret", "localhost (port " + victimPort + ") " + byName},
		{"under-localhost", "http://Api.LocalHost.:" + victimPort + "/secret", "Api.LocalHost. (port " + victimPort + ") " + byName},
		{"name", "http://loop.example.test:" + victimPort + "/secret", byName},
		{"private", "http://internal.example.test/secret", byName},
		{"metadata", "http://meta.example.test/latest/meta-data/", byName},
		{"redirect", "http://public.example.test/redirect", "127.0.0.1 is a loopback address"},
	} {
		redirectTo.Store("http://127.0.0.1:" + victimPort + "/secret")
		before := len(n.dialled())
		f.Resolve = n.resolve
		if strings.HasSuffix(c.name, "localhost") {
			// localhost names are the loopback by definition (RFC 6761),
			// even where the host's resolver does not know them.
			f.Resolve = func(ctx context.Context, host string) ([]netip.Addr, error) {
				return nil, fmt.Errorf("lookup %s: no such host", host)
			}
		}
		_, err := fetch(f, c.name, c.source, wrong)
		if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), `input "`+c.name+`"`) {
			t.Errorf("%s: %v; want ErrRefused naming the input and %q", c.name, err, c.want)
			continue
		}
		if strings.Contains(err.Error(), sum(secretBody)) || strings.Contains(err.Error(), sum(wrong)) {
			t.Errorf("%s: the error shows a digest: %v", c.name, err)
		}
		if strings.Contains(c.want, byName) && (strings.Contains(err.Error(), "10.0.0.5") || strings.Contains(err.Error(), "169.254.169.254") || strings.Contains(err.Error(), "127.0.0.1")) {
			t.Errorf("%s: the error shows what the name resolved to: %v", c.name, err)
		}
		for _, d := range n.dialled()[before:] {
			if d != "203.0.113.10:80" {
				t.Errorf("%s: dialled %s", c.name, d)
			}
		}
		t.Logf("%s: %v", c.name, err)
	}
	if victimHits.Load() != 0 {
		t.Fatalf("the loopback victim was asked %d times", victimHits.Load())
	}
	f.Resolve = n.resolve

	// Rebinding: the first lookup gives the public address, the next
	// loopback. The first fetch dials the public literal; the second is
	// refused, not sent to whatever the name now says.
	before := len(n.dialled())
	if _, err := fetch(f, "flip1", "http://flip.example.test/data", good); err != nil {
		t.Fatalf("rebinding name, first lookup: %v", err)
	}
	if _, err := fetch(f, "flip2", "http://flip.example.test/data", good); !errors.Is(err, ErrRefused) {
		t.Fatalf("rebinding name, second lookup (loopback): %v; want ErrRefused", err)
	}
	if d := n.dialled()[before:]; fmt.Sprint(d) != "[203.0.113.10:80]" {
		t.Fatalf("rebinding: dialled %v, want only the public literal once", d)
	}

	// A mismatch from a public address shows the pin, not the digest of
	// what came back.
	_, err = fetch(f, "mismatch", "http://public.example.test/data", wrong)
	if !errors.Is(err, ErrChecksum) || strings.Contains(err.Error(), sum(good)) || !strings.Contains(err.Error(), sum(wrong)) {
		t.Fatalf("mismatch: %v; want the pin and not the body's digest", err)
	}

	// The operator's policy opens one loopback port, and only that one.
	_, port, _ := net.SplitHostPort(public.Listener.Addr().String())
	wide := confinedFetcher(t, apiConfinement(t, false, []string{"127.0.0.1/32:" + port}, nil), n)
	if _, err := fetch(wide, "opened", "http://127.0.0.1:"+port+"/data", good); err != nil {
		t.Fatalf("a loopback port api_inputs.network_allow names: %v", err)
	}
	if _, err := fetch(wide, "closed", "http://127.0.0.1:"+victimPort+"/secret", secretBody); !errors.Is(err, ErrRefused) {
		t.Fatalf("another loopback port: %v; want ErrRefused", err)
	}
	// A redirect from the opened port to another one is refused too.
	redirectTo.Store("http://127.0.0.1:" + victimPort + "/secret")
	if _, err := fetch(wide, "hop", "http://127.0.0.1:"+port+"/redirect", secretBody); !errors.Is(err, ErrRefused) {
		t.Fatalf("a redirect from an opened port to a closed one: %v; want ErrRefused", err)
	}
	if victimHits.Load() != 0 {
		t.Fatalf("the loopback victim was asked %d times", victimHits.Load())
	}

	// egress_deny holds for API fetches, by name before any lookup and by
	// address after it.
	deny := confinedFetcher(t, apiConfinement(t, false, nil, []string{"*.corp.example.test", "203.0.113.0/24"}), n)
	resolves := n.resolves
	if _, err := fetch(deny, "corp", "http://files.corp.example.test/x", good); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "egress_deny") || n.resolves != resolves {
		t.Fatalf("a name egress_deny forbids: %v (%d lookups); want ErrRefused before any lookup", err, n.resolves-resolves)
	}
	if _, err := fetch(deny, "range", "http://public.example.test/data", good); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "egress_deny") {
		t.Fatalf("an address egress_deny forbids: %v", err)
	}

	// Without the confinement (the operator's own workflow), the same
	// literal is fetched: the refusals above are the confinement's.
	op := newFetcher(t)
	if _, err := fetch(op, "operator", "http://127.0.0.1:"+victimPort+"/secret", secretBody); err != nil {
		t.Fatalf("the operator's fetch: %v", err)
	}
	if victimHits.Load() != 1 {
		t.Fatalf("the operator's fetch asked the server %d times", victimHits.Load())
	}
}

// gitServer serves the bare repositories under dir over git's dumb HTTP
// protocol on loopback, counting requests and keeping every Authorization
// header; with needAuth it answers 401 to requests without one.
func gitServer(t *testing.T, dir string, needAuth bool) (*httptest.Server, *atomic.Int64, func() []string) {
	t.Helper()
	var hits atomic.Int64
	var mu sync.Mutex
	var auths []string
	files := http.FileServer(http.Dir(dir))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if a := r.Header.Get("Authorization"); a != "" {
			mu.Lock()
			auths = append(auths, a)
			mu.Unlock()
		} else if needAuth {
			w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
			http.Error(w, "who are you", http.StatusUnauthorized)
			return
		}
		files.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, &hits, func() []string { mu.Lock(); defer mu.Unlock(); return slices.Clone(auths) }
}

// bareRepo makes a repository with files, clones it bare to
// serve/NAME.git ready for dumb HTTP, and returns its commit.
func bareRepo(t *testing.T, serve, name string, files map[string]string, extra ...[]string) string {
	t.Helper()
	work := t.TempDir()
	git(t, work, "init", "-q")
	for p, body := range files {
		writeFile(t, filepath.Join(work, p), []byte(body))
	}
	git(t, work, "add", ".")
	for _, args := range extra {
		git(t, work, args...)
	}
	git(t, work, "commit", "-q", "-m", "c")
	commit := git(t, work, "rev-parse", "HEAD")
	bare := filepath.Join(serve, name+".git")
	git(t, serve, "clone", "-q", "--bare", work, bare)
	git(t, bare, "update-server-info")
	return commit
}

// TestConfinedGit: an API caller's git source over http(s) is cloned by a
// git that reaches the network only through the fetch's guard: a loopback
// repository is refused (by its literal before anything runs, by its name
// when git dials it), one the policy opens is checked out, a submodule on
// a closed address is refused through the same guard, and the host's git
// credentials are never offered.
func TestConfinedGit(t *testing.T) {
	testtierCommand(t, "git")
	ctx := context.Background()
	serve := t.TempDir()
	commit := bareRepo(t, serve, "repo", map[string]string{"train.py": "print('api')\n"})
	srv, hits, _ := gitServer(t, serve, false)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	in := workflow.Input{Name: "code", Kind: workflow.InputGit, Source: "git::http://127.0.0.1:" + port + "/repo.git", Commit: commit}
	ws := t.TempDir()

	f := confinedFetcher(t, apiConfinement(t, false, nil, nil), nil)
	if _, err := f.Fetch(ctx, in, "", filepath.Join(ws, "literal")); !errors.Is(err, ErrRefused) {
		t.Fatalf("a loopback repository: %v; want ErrRefused", err)
	}
	byName := in
	byName.Source = "git::http://localhost:" + port + "/repo.git"
	_, err := f.Fetch(ctx, byName, "", filepath.Join(ws, "name"))
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "localhost (port "+port+")") {
		t.Fatalf("a loopback repository by name: %v; want ErrRefused from git's dial", err)
	}
	t.Logf("by name: %v", err)
	// https goes through the proxy as a CONNECT, judged the same way.
	byName.Source = "git::https://localhost:" + port + "/repo.git"
	if _, err := f.Fetch(ctx, byName, "", filepath.Join(ws, "tls")); !errors.Is(err, ErrRefused) {
		t.Fatalf("a loopback repository by name over https: %v; want ErrRefused from git's CONNECT", err)
	}
	if hits.Load() != 0 {
		t.Fatalf("the refused repository was asked %d times", hits.Load())
	}

	open := confinedFetcher(t, apiConfinement(t, false, []string{"127.0.0.1/32:" + port}, nil), nil)
	got, err := open.Fetch(ctx, in, "", filepath.Join(ws, "open"))
	if err != nil {
		t.Fatalf("a repository api_inputs.network_allow opens: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(got.Path, "train.py")); string(b) != "print('api')\n" || got.Input.Commit != commit || got.Cached {
		t.Fatalf("checkout: train.py %q, %+v", b, got)
	}
	if _, err := os.Lstat(filepath.Join(got.Path, ".git")); err == nil {
		t.Error(".git left in the checkout")
	}
	if _, ok, _ := open.Store.Ref("git", commit); ok {
		t.Error("a confined fetch recorded a commit-to-tree ref others would be served by")
	}

	// A submodule on another port, which the policy does not open.
	subServe := t.TempDir()
	bareRepo(t, subServe, "sub", map[string]string{"secret.txt": "internal"})
	subSrv, subHits, _ := gitServer(t, subServe, false)
	withSub := bareRepo(t, serve, "withsub", map[string]string{"README": "x"},
		[]string{"-c", "protocol.allow=always", "submodule", "add", "-q", subSrv.URL + "/sub.git", "sub"})
	before := subHits.Load() // git submodule add above fetched it itself
	subIn := in
	subIn.Name, subIn.Source, subIn.Commit = "withsub", "git::http://127.0.0.1:"+port+"/withsub.git", withSub
	_, err = open.Fetch(ctx, subIn, "", filepath.Join(ws, "withsub"))
	if !errors.Is(err, ErrRefused) {
		t.Fatalf("a submodule on a closed port: %v; want ErrRefused", err)
	}
	if subHits.Load() != before {
		t.Fatalf("the closed submodule was asked %d times", subHits.Load()-before)
	}

	// The host's git credentials: a helper in the global configuration
	// answers for every host. The operator's fetch uses it; the API
	// caller's does not.
	authServe := t.TempDir()
	authCommit := bareRepo(t, authServe, "private", map[string]string{"a": "b"})
	authSrv, _, auths := gitServer(t, authServe, true)
	cfg := filepath.Join(t.TempDir(), "gitconfig")
	writeFile(t, cfg, []byte("[credential]\n\thelper = \"!f() { echo username=operator; echo password=s3cret-operator; }; f\"\n"))
	t.Setenv("GIT_CONFIG_GLOBAL", cfg)
	_, authPort, _ := net.SplitHostPort(authSrv.Listener.Addr().String())
	authIn := workflow.Input{Name: "private", Kind: workflow.InputGit, Source: "git::http://127.0.0.1:" + authPort + "/private.git", Commit: authCommit}
	api := confinedFetcher(t, apiConfinement(t, false, []string{"127.0.0.1/32:" + authPort}, nil), nil)
	if _, err := api.Fetch(ctx, authIn, "", filepath.Join(ws, "api-private")); err == nil {
		t.Fatal("the API caller's fetch of a repository that needs the operator's credentials succeeded")
	}
	if a := auths(); len(a) != 0 {
		t.Fatalf("the API caller's fetch sent credentials: %q", a)
	}
	if _, err := newFetcher(t).Fetch(ctx, authIn, "", filepath.Join(ws, "op-private")); err != nil {
		t.Fatalf("the operator's fetch with the operator's credentials: %v", err)
	}
	if len(auths()) == 0 {
		t.Fatal("the operator's fetch sent no credentials: this test's helper is not in effect")
	}
}
