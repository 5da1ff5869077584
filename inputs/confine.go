package inputs

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentsandbox/agentsandbox/egress"
	"github.com/agentsandbox/agentsandbox/egress/hostaddr"
	"github.com/agentsandbox/agentsandbox/record"
	"github.com/agentsandbox/agentsandbox/workflow"
)

// ErrRefused marks an input that the input policy of a confined fetch
// (Fetcher.Confine: a workflow an API caller sent) does not allow: a
// source kind or scheme it does not take, or an address it may not reach.
var ErrRefused = errors.New("refused by the server's input policy for API callers")

// ErrNoSource marks a confined file input whose source does not exist.
// The store is never consulted for it, so the error is the same whether
// or not the store holds content of the pinned digest.
var ErrNoSource = errors.New("no such source")

// Confinement is the input policy of a workflow that someone other than
// the operator wrote: an API caller's. Under it
//   - file inputs resolve beneath the base directory only (AllowOutside
//     is ignored), and are read and hashed whenever they are there;
//   - http(s) inputs, and git sources over http(s), dial only addresses
//     Network accepts: each name is resolved once and the addresses it
//     gave are judged and dialled as literals, on every connection,
//     redirects and git's own included, so neither DNS rebinding nor a
//     redirect reaches a refused address; the host's proxy settings, git
//     configuration and credentials are not used;
//   - git sources use only GitSchemes;
//   - nothing is served from the store by its pin unless Owns says the
//     caller owns that content;
//   - a checksum mismatch does not show the digest of what was read.
type Confinement struct {
	// GitSchemes are the schemes a git:: source may use ("ssh" for
	// scp-like sources too). http and https are fetched confined; any
	// other scheme named here is fetched as the operator's own.
	GitSchemes []string
	// Network judges every address dialled: Rules.CheckUpstream with the
	// host's own addresses, so loopback, private, link-local and other
	// internal addresses (the host's own, and IPv6 forms carrying an
	// internal IPv4) are refused unless an Internal rule (from
	// api_inputs.network_allow) contains them, with its port when it has
	// one; a Deny rule (egress_deny) forbids its addresses, and its names,
	// always. nil is no rules: public addresses only.
	Network *egress.Rules
	// HostAddrs are the host's own addresses; nil is the host's
	// (egress/hostaddr.Default).
	HostAddrs egress.HostAddrs
	// Owns reports whether the caller owns stored content d (a file's
	// sha256, a tree's NAR hash), which may then be served from the store
	// by its pin without the source being read. nil owns nothing.
	Owns func(d record.Digest) bool
}

// NewConfinement builds a Confinement from the policy's settings: the git
// schemes, whether every stored blob may be served (fromStore), the
// network entries that open special addresses, and the forbidden ones.
func NewConfinement(gitSchemes []string, fromStore bool, allow, deny []string) (*Confinement, error) {
	rules, err := egress.NewRules(nil, deny)
	if err != nil {
		return nil, err
	}
	for _, e := range allow {
		r, err := egress.ParseRule(e)
		if err != nil {
			return nil, fmt.Errorf("policy data agentsandbox.api_inputs.network_allow: %w", err)
		}
		if !r.IsCIDR() {
			return nil, fmt.Errorf("policy data agentsandbox.api_inputs.network_allow: %q is a name; list addresses or prefixes", e)
		}
		rules.Internal = append(rules.Internal, r)
	}
	c := &Confinement{GitSchemes: slices.Clone(gitSchemes), Network: rules}
	if fromStore {
		c.Owns = func(record.Digest) bool { return true }
	}
	return c, nil
}

func (c *Confinement) owns(d record.Digest) bool { return c.Owns != nil && c.Owns(d) }

// refused is an ErrRefused error for input in: what was refused, and the
// policy data key that would allow it.
func refused(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrRefused, fmt.Sprintf(format, a...))
}

// gitScheme is the scheme of a git:: source: "ssh" for scp-like ones.
func gitScheme(source string) string {
	rest := strings.TrimPrefix(source, "git::")
	if u, err := url.Parse(rest); err == nil && u.Scheme != "" && (u.Host != "" || u.Scheme == "file") {
		return u.Scheme
	}
	return "ssh"
}

// Check judges in under c before anything is fetched: its kind and
// scheme, and an address written in its URL. Names are judged when they
// are dialled. A nil Confinement allows everything.
func (c *Confinement) Check(in workflow.Input) error {
	if c == nil {
		return nil
	}
	var err error
	switch in.Kind {
	case workflow.InputFile:
		return nil
	case workflow.InputGit:
		s := gitScheme(in.Source)
		if !slices.Contains(c.GitSchemes, s) {
			hint := "git sources over " + strings.Join(c.GitSchemes, " or ")
			if len(c.GitSchemes) == 0 {
				hint = "no git sources"
			}
			return fmt.Errorf("input %q: %w", in.Name, refused("git source %q uses %s, and this server takes %s from API callers (data.agentsandbox.api_inputs.git_schemes); local repositories, ssh and git:// would be fetched with the server's own files, keys and network", in.Source, s, hint))
		}
		if s == "http" || s == "https" {
			err = c.checkURL(strings.TrimPrefix(in.Source, "git::"))
		}
	case workflow.InputHTTP:
		err = c.checkURL(strings.TrimPrefix(in.Source, "http::"))
	}
	if err != nil {
		return fmt.Errorf("input %q: %w", in.Name, err)
	}
	return nil
}

// checkURL judges the host of an http(s) URL: an address literal by
// address, a name by the egress_deny names.
func (c *Confinement) checkURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return nil // the fetcher says what is wrong with it
	}
	port := u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
	}
	return c.checkHost(u.Hostname(), port)
}

// checkHost judges a host (a name or an address literal) and port before
// resolution.
func (c *Confinement) checkHost(host, port string) error {
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return refused("port %q of %s is not a port number", port, host)
	}
	if a, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		// Without its zone: a prefix contains no zoned address, and the
		// dial drops the zone too.
		return c.checkAddr(a.Unmap().WithZone(""), uint16(p))
	}
	if r, ok := c.rules().ResolveRule(host); !ok && r.Entry != "" {
		return refused("%s is forbidden by the policy (data.agentsandbox.egress_deny %q)", host, r.Entry)
	}
	return nil
}

// hostAddrs are the host's own addresses, refused like loopback.
func (c *Confinement) hostAddrs() egress.HostAddrs {
	if c.HostAddrs != nil {
		return c.HostAddrs
	}
	return hostaddr.Default
}

func (c *Confinement) rules() *egress.Rules {
	if c.Network == nil {
		return &egress.Rules{}
	}
	return c.Network
}

// checkAddr judges one address about to be dialled at port: the egress
// package's CheckUpstream under the input policy's rules.
func (c *Confinement) checkAddr(a netip.Addr, port uint16) error {
	if why := c.addrRefusal(a, port); why != "" {
		return refused("%s", why)
	}
	return nil
}

// addrRefusal says why a at port is refused, "" when it is not: the
// egress package judges it; an internal address is named with the
// api_inputs.network_allow entry that would open it.
func (c *Confinement) addrRefusal(a netip.Addr, port uint16) string {
	rs := c.rules()
	err := rs.CheckUpstream(netip.AddrPortFrom(a, port), c.hostAddrs())
	if err == nil {
		return ""
	}
	a = a.Unmap().WithZone("")
	ins, cerr := egress.Classify(a, c.hostAddrs())
	if cerr != nil || len(ins) == 0 {
		return err.Error() // forbidden for everyone (egress_deny), or unknowable
	}
	entry := netip.PrefixFrom(a, a.BitLen()).String() + ":" + strconv.Itoa(int(port))
	if a.Is6() {
		entry = "[" + netip.PrefixFrom(a, a.BitLen()).String() + "]:" + strconv.Itoa(int(port))
	}
	in := ins[0]
	what := a.String() + " is " + in.What
	if in.Via != "" {
		what = fmt.Sprintf("%s carries %s (%s)", a, in, in.Via)
	} else if !in.Host {
		what += " (" + in.Range.String() + ")"
	}
	return fmt.Sprintf("%s, and an API caller's inputs come only from public addresses unless the operator opens internal ones "+
		"in data.agentsandbox.api_inputs.network_allow (%q would open this one)", what, entry)
}

// guard is one confined fetch's dialler: it judges every address before
// dialling it and remembers the first refusal, so the fetch reports that
// instead of what the HTTP client or git made of it.
type guard struct {
	f  *Fetcher
	c  *Confinement
	mu sync.Mutex
	// refusal is the first dial the policy refused.
	refusal error
}

func (g *guard) refuse(err error) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.refusal == nil {
		g.refusal = err
	}
	return err
}

// refused returns the first refusal, if any.
func (g *guard) refused() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.refusal
}

// dial resolves address's host once, judges every address it gave and
// dials the first accepted one that answers, as an address:port literal.
func (g *guard) dial(ctx context.Context, network, address string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	// A literal is judged by checkHost; a name by egress_deny there, and
	// then by every address it resolves to.
	if err := g.c.checkHost(host, port); err != nil {
		return nil, g.refuse(err)
	}
	p, _ := strconv.ParseUint(port, 10, 16)
	cands := []netip.Addr{}
	if a, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		cands = append(cands, a)
	} else if isLocalhostName(host) {
		// RFC 6761: these names are the loopback, whatever the host's
		// resolver says of them (or whether it knows them at all).
		cands = append(cands, netip.MustParseAddr("127.0.0.1"), netip.IPv6Loopback())
	} else {
		resolve := g.f.Resolve
		if resolve == nil {
			resolve = func(ctx context.Context, host string) ([]netip.Addr, error) {
				return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
			}
		}
		if cands, err = resolve(ctx, host); err != nil {
			return nil, fmt.Errorf("resolve %q: %w", host, err)
		}
		if len(cands) == 0 {
			return nil, fmt.Errorf("resolve %q: no addresses", host)
		}
	}
	dial := g.f.Dial
	if dial == nil {
		dial = (&net.Dialer{Timeout: 30 * time.Second}).DialContext
	}
	var errs []error
	for _, a := range cands {
		a = a.Unmap().WithZone("")
		if g.c.addrRefusal(a, uint16(p)) != "" {
			continue
		}
		target := netip.AddrPortFrom(a, uint16(p)).String()
		conn, err := dial(ctx, "tcp", target)
		if err == nil {
			return conn, nil
		}
		errs = append(errs, fmt.Errorf("dial %s: %w", target, err))
	}
	if len(errs) == 0 {
		// Which addresses, the caller does not learn: the host's resolver
		// is not a lookup service for its internal names.
		return nil, g.refuse(refused("%s (port %s) resolves only to addresses an API caller's inputs may not come from: loopback, private, link-local or other special addresses, or ones the policy forbids (data.agentsandbox.egress_deny); the operator can open special ones by address in data.agentsandbox.api_inputs.network_allow", host, port))
	}
	return nil, errors.Join(errs...)
}

// isLocalhostName reports whether host is "localhost" or a name under it
// (RFC 6761, 6.3), in any case, with or without the final dot.
func isLocalhostName(host string) bool {
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	return h == "localhost" || strings.HasSuffix(h, ".localhost")
}

// httpClient is the HTTP client of a confined fetch: every connection is
// dialled by g, the host's proxy settings are not used, and there are no
// cookies. It keeps the TLS settings and timeout of Fetcher.HTTPClient.
func (g *guard) httpClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	var timeout time.Duration
	if base := g.f.HTTPClient; base != nil {
		timeout = base.Timeout
		if bt, ok := base.Transport.(*http.Transport); ok && bt.TLSClientConfig != nil {
			t.TLSClientConfig = bt.TLSClientConfig.Clone()
		}
	}
	t.Proxy = nil
	t.DialContext = g.dial
	t.DialTLSContext = nil
	return &http.Client{Transport: t, Timeout: timeout}
}
