package inputs

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"github.com/agentsandbox/agentsandbox/workflow"
)

// gitConfined clones remote (an http or https URL) into repo and checks
// out in.Commit and its submodules, for a confined fetch. git reaches the
// network only through a proxy on loopback that dials with the fetch's
// guard, so every connection it makes (redirects and submodules too) is
// judged by the address it goes to; it may use http and https only, and
// sees none of the host's git configuration, credentials, hooks or proxy
// settings.
func (f *Fetcher) gitConfined(ctx context.Context, in workflow.Input, remote, stage, repo string) error {
	g := &guard{f: f, c: f.Confine}
	p, err := startGitProxy(g)
	if err != nil {
		return fmt.Errorf("git checkout of %s at %s: %w", in.Source, in.Commit, err)
	}
	defer p.close()
	home := filepath.Join(stage, "home")
	if err := os.Mkdir(home, 0o700); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
	defer cancel()
	git := f.Git
	if git == "" {
		git = "git"
	}
	run := func(dir string, args ...string) error {
		cmd := exec.CommandContext(ctx, git, args...)
		cmd.Dir = dir
		cmd.Env = gitConfinedEnv(home, p.url())
		out, err := cmd.CombinedOutput()
		if refusal := g.refused(); refusal != nil {
			return fmt.Errorf("git checkout of %s at %s: %w", in.Source, in.Commit, refusal)
		}
		if err != nil {
			if len(out) > 4<<10 {
				out = out[len(out)-4<<10:]
			}
			return fmt.Errorf("git checkout of %s at %s: git %s: %w: %s", in.Source, in.Commit, args[0], err, out)
		}
		return nil
	}
	if err := run(stage, "clone", "--no-checkout", "--quiet", "--", remote, repo); err != nil {
		return err
	}
	if err := run(repo, "checkout", "--quiet", "--detach", in.Commit); err != nil {
		return err
	}
	return run(repo, "submodule", "update", "--init", "--recursive", "--quiet")
}

// gitConfinedConfig is the configuration every confined git command runs
// with: the proxy with its credentials, and no credential helper, askpass
// program or hooks.
func gitConfinedConfig(proxy string) [][2]string {
	return [][2]string{
		{"http.proxy", proxy},
		{"http.proxyAuthMethod", "basic"},
		{"credential.helper", ""},
		{"core.askPass", ""},
		{"core.hooksPath", "/dev/null"},
		{"core.fsmonitor", "false"},
		{"init.templateDir", ""},
	}
}

// gitConfinedEnv is the whole environment of a confined git command: no
// system or global configuration, a fresh HOME (no .netrc, no ssh keys),
// no prompts, only the http and https transports, and gitConfinedConfig
// as GIT_CONFIG_* variables, which the git commands it starts (a
// submodule's clone) inherit and which, unlike -c, other users cannot
// read in the process list (the proxy's credentials are in it).
func gitConfinedEnv(home, proxy string) []string {
	env := []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + home,
		"XDG_CONFIG_HOME=" + home,
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_TERMINAL_PROMPT=0",
		"GIT_ALLOW_PROTOCOL=http:https",
		"LC_ALL=C",
	}
	cfg := gitConfinedConfig(proxy)
	for i, kv := range cfg {
		env = append(env, fmt.Sprintf("GIT_CONFIG_KEY_%d=%s", i, kv[0]), fmt.Sprintf("GIT_CONFIG_VALUE_%d=%s", i, kv[1]))
	}
	return append(env, fmt.Sprintf("GIT_CONFIG_COUNT=%d", len(cfg)))
}

// gitProxy is an HTTP proxy on loopback for one confined git fetch: it
// takes CONNECT (https) and absolute-form requests (http), only with its
// own credentials, and dials upstream with the fetch's guard.
type gitProxy struct {
	g     *guard
	ln    net.Listener
	srv   *http.Server
	auth  string // the Proxy-Authorization value it takes
	cred  string // user:token
	rp    *httputil.ReverseProxy
	mu    sync.Mutex
	conns map[net.Conn]bool // hijacked tunnels, closed with the proxy
}

func startGitProxy(g *guard) (*gitProxy, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("start the fetch proxy: %w", err)
	}
	p := &gitProxy{g: g, ln: ln, cred: "agentsandbox:" + hex.EncodeToString(b), conns: map[net.Conn]bool{}}
	p.auth = "Basic " + base64.StdEncoding.EncodeToString([]byte(p.cred))
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil
	t.DialContext = g.dial
	p.rp = &httputil.ReverseProxy{
		Rewrite:   func(pr *httputil.ProxyRequest) { pr.Out.URL = pr.In.URL },
		Transport: t,
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			p.fail(w, err)
		},
	}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 30 * time.Second}
	go p.srv.Serve(ln)
	return p, nil
}

func (p *gitProxy) url() string { return "http://" + p.cred + "@" + p.ln.Addr().String() }

func (p *gitProxy) close() {
	p.srv.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}

// fail answers a request the proxy could not carry: 403 for a refusal.
func (p *gitProxy) fail(w http.ResponseWriter, err error) {
	code := http.StatusBadGateway
	if errors.Is(err, ErrRefused) {
		code = http.StatusForbidden
	}
	http.Error(w, err.Error(), code)
}

func (p *gitProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if subtle.ConstantTimeCompare([]byte(r.Header.Get("Proxy-Authorization")), []byte(p.auth)) != 1 {
		w.Header().Set("Proxy-Authenticate", `Basic realm="agentsandbox input fetch"`)
		http.Error(w, "proxy credentials required", http.StatusProxyAuthRequired)
		return
	}
	switch {
	case r.Method == http.MethodConnect:
		p.tunnel(w, r)
	case r.URL.IsAbs() && r.URL.Scheme == "http":
		r.Header.Del("Proxy-Authorization")
		p.rp.ServeHTTP(w, r)
	default:
		http.Error(w, "this proxy takes CONNECT and absolute http:// requests", http.StatusBadRequest)
	}
}

// tunnel carries a CONNECT: dial the authority with the guard, then copy
// both ways until either side ends.
func (p *gitProxy) tunnel(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), time.Minute)
	up, err := p.g.dial(ctx, "tcp", r.Host)
	cancel()
	if err != nil {
		p.fail(w, err)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		up.Close()
		http.Error(w, "cannot tunnel", http.StatusInternalServerError)
		return
	}
	down, rw, err := hj.Hijack()
	if err != nil {
		up.Close()
		return
	}
	p.mu.Lock()
	p.conns[down], p.conns[up] = true, true
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.conns, down)
		delete(p.conns, up)
		p.mu.Unlock()
		down.Close()
		up.Close()
	}()
	if _, err := io.WriteString(down, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	done := make(chan struct{}, 2)
	go func() { io.Copy(up, rw.Reader); done <- struct{}{} }()
	go func() { io.Copy(down, up); done <- struct{}{} }()
	<-done
}
