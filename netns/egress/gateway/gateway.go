// Package gateway is one step's egress, put together: the firewall in the
// step's network namespace (netns.SetupEgress), the step's resolver
// (netns/egress/dns) and the transparent proxy with its HTTP(S)_PROXY endpoint
// (netns/egress/proxy), all listening inside the namespace and owned by the
// host process that runs the step, and the audit log they write.
//
// A backend starts a Gateway once the step's namespace (and a VM's tap)
// exists and stops it when the job has ended (it implements the runner's
// vmrunner.Egress, which it does not import: the network room sits below
// the runner); the engine stores Log as a blob and names it in the step's
// record.
package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/agentsandbox/agentsandbox/egress"
	"github.com/agentsandbox/agentsandbox/netns"
	"github.com/agentsandbox/agentsandbox/netns/egress/dns"
	"github.com/agentsandbox/agentsandbox/netns/egress/proxy"
)

// Ports inside every step's namespace. The namespace is the step's own,
// so they never clash between steps.
const (
	// ProxyPort is the transparent proxy's: the firewall redirects every
	// TCP connection that is not loopback to it.
	ProxyPort = 15001
	// EndpointPort is the HTTP(S)_PROXY endpoint's: 127.0.0.1 in a jail,
	// egress.Gateway for a VM guest.
	EndpointPort = 3128
	// DNSPort is the resolver's, on egress.Gateway.
	DNSPort = 53
)

// MaxLogBytes bounds the audit log a step can make the host keep: every
// line is the job's doing. Lines past it are counted, and the count is
// the log's last line.
const MaxLogBytes = 16 << 20

// Config is one step's egress.
type Config struct {
	Step  string
	Rules *egress.Rules
	// Bandwidth is resources.bandwidth in bytes per second, enforced by
	// the proxy for every connection together (each direction on its own).
	Bandwidth int64
	// Resolve and Dial reach the internet from the host: nil uses the
	// host's resolver and dialer. Tests give ones that reach a network
	// namespace playing the internet.
	Resolve func(ctx context.Context, host string) ([]netip.Addr, error)
	Dial    func(ctx context.Context, network, address string) (net.Conn, error)
	// HostAddrs are the own addresses of the host Dial dials from (the
	// proxy refuses them upstream); nil: this process's
	// (hostaddr.Default).
	HostAddrs egress.HostAddrs
	// OnConn, when set, hears of every connection as it is logged (the
	// engine tells the user of denied ones as they happen).
	OnConn func(egress.Conn)
}

// Gateway is one step's running egress. It implements vmrunner.Egress
// (vmrunner/egress_test.go checks it).
type Gateway struct {
	cfg    Config
	mapper *egress.Mapper
	live   *egress.Live // the rules in force (SetRules)

	mu      sync.Mutex
	log     []byte
	dropped int // lines not kept past MaxLogBytes
	started bool
	stopped bool
	room    netns.EgressRoom
	proxy   *proxy.Proxy
	dns     *dns.Server
	serving sync.WaitGroup
	errs    []error
}

// New returns a gateway for cfg; nothing runs until Start.
func New(cfg Config) (*Gateway, error) {
	if cfg.Rules == nil {
		return nil, errors.New("egress gateway: no rules")
	}
	return &Gateway{cfg: cfg, mapper: egress.NewMapper(), live: egress.NewLive(cfg.Rules)}, nil
}

// SetRules replaces the rules: the next connection and DNS query are
// judged by r (egress.Live), and the audit log gets a line saying so.
func (g *Gateway) SetRules(r *egress.Rules) {
	g.live.Store(r)
	allow, deny := r.Entries()
	g.writeLine(egress.RulesChange{Type: egress.LineRules, Time: time.Now().UTC(), Step: g.cfg.Step, Allow: allow, Deny: deny})
}

// Rules are the rules in force.
func (g *Gateway) Rules() *egress.Rules { return g.live.Load() }

// Start sets up the firewall in room and starts the resolver and the
// proxy on listeners made inside it. On error everything it started is
// stopped again.
func (g *Gateway) Start(room netns.EgressRoom, tap string) (err error) {
	g.mu.Lock()
	if g.started {
		g.mu.Unlock()
		return errors.New("egress gateway: started twice")
	}
	g.started, g.room = true, room
	g.mu.Unlock()
	defer func() {
		if err != nil {
			err = errors.Join(fmt.Errorf("open step %q's egress: %w", g.cfg.Step, err), g.Stop())
		}
	}()
	if err := room.SetupEgress(netns.Egress{ProxyPort: ProxyPort, EndpointPort: EndpointPort, Tap: tap}); err != nil {
		return err
	}
	endpointAddr := "127.0.0.1"
	if tap != "" {
		endpointAddr = egress.Gateway.String()
	}
	type listener struct {
		network, addr string
	}
	listen := func(l listener) (net.Listener, error) {
		ln, err := room.Listen(l.network, l.addr)
		if err != nil {
			return nil, fmt.Errorf("listen on %s %s in the step's namespace: %w", l.network, l.addr, err)
		}
		return ln, nil
	}
	t4, err := listen(listener{"tcp4", "0.0.0.0:" + strconv.Itoa(ProxyPort)})
	if err != nil {
		return err
	}
	t6, err := listen(listener{"tcp6", "[::]:" + strconv.Itoa(ProxyPort)})
	if err != nil {
		t4.Close()
		return err
	}
	ep, err := listen(listener{"tcp4", net.JoinHostPort(endpointAddr, strconv.Itoa(EndpointPort))})
	if err != nil {
		t4.Close()
		t6.Close()
		return err
	}
	dnsAddr := net.JoinHostPort(egress.Gateway.String(), strconv.Itoa(DNSPort))
	dt, err := listen(listener{"tcp4", dnsAddr})
	if err != nil {
		t4.Close()
		t6.Close()
		ep.Close()
		return err
	}
	du, err := room.ListenPacket("udp4", dnsAddr)
	if err != nil {
		t4.Close()
		t6.Close()
		ep.Close()
		dt.Close()
		return fmt.Errorf("listen on udp %s in the step's namespace: %w", dnsAddr, err)
	}

	p := proxy.New(proxy.Config{
		Step: g.cfg.Step, Live: g.live, Mapper: g.mapper,
		Resolve: g.cfg.Resolve, Dial: g.cfg.Dial, HostAddrs: g.cfg.HostAddrs,
		Bandwidth: g.cfg.Bandwidth,
		Log: func(c egress.Conn) {
			g.writeLine(c)
			if g.cfg.OnConn != nil {
				g.cfg.OnConn(c)
			}
		},
	})
	d := &dns.Server{Step: g.cfg.Step, Live: g.live, Mapper: g.mapper,
		Log: func(q egress.Query) { g.writeLine(q) }}
	g.mu.Lock()
	g.proxy, g.dns = p, d
	g.mu.Unlock()
	g.serve(func() error { return p.ServeTransparent(t4) })
	g.serve(func() error { return p.ServeTransparent(t6) })
	g.serve(func() error { return p.ServeEndpoint(ep) })
	g.serve(func() error { return d.Serve(du, dt) })
	return nil
}

// serve runs one server until Stop, keeping an error it ends with.
func (g *Gateway) serve(fn func() error) {
	g.serving.Add(1)
	go func() {
		defer g.serving.Done()
		if err := fn(); err != nil && !errors.Is(err, net.ErrClosed) && !errors.Is(err, proxy.ErrClosed) {
			g.mu.Lock()
			g.errs = append(g.errs, err)
			g.mu.Unlock()
		}
	}()
}

// Stop closes the proxy (every connection is closed and logged) and the
// resolver, and appends the firewall's drop counters to the log.
func (g *Gateway) Stop() error {
	g.mu.Lock()
	if g.stopped || !g.started {
		g.mu.Unlock()
		return nil
	}
	g.stopped = true
	p, d, room := g.proxy, g.dns, g.room
	g.mu.Unlock()
	var errs []error
	if p != nil {
		errs = append(errs, p.Close())
	}
	if d != nil {
		errs = append(errs, d.Close())
	}
	g.serving.Wait()
	if room != nil {
		c, err := room.EgressCounters()
		if err != nil {
			errs = append(errs, fmt.Errorf("read step %q's firewall counters: %w", g.cfg.Step, err))
		} else {
			g.writeLine(drops(g.cfg.Step, c))
		}
	}
	g.mu.Lock()
	errs = append(errs, g.errs...)
	if g.dropped > 0 {
		g.appendLocked(egress.Truncated{Type: "truncated", Step: g.cfg.Step, Lines: g.dropped, Limit: MaxLogBytes})
	}
	g.mu.Unlock()
	return errors.Join(errs...)
}

func drops(step string, c netns.EgressCounters) egress.Drops {
	d := egress.Drops{Type: "drops", Step: step, By: map[string]uint64{}}
	for _, ch := range []struct {
		name string
		n    netns.EgressCounter
	}{{"output", c.Output}, {"input", c.Input}, {"forward", c.Forward}} {
		d.Packets += ch.n.Packets
		d.Bytes += ch.n.Bytes
		d.By[ch.name] = ch.n.Packets
	}
	return d
}

// writeLine appends one JSON line to the log, within MaxLogBytes.
func (g *Gateway) writeLine(v any) {
	g.mu.Lock()
	defer g.mu.Unlock()
	b, err := json.Marshal(v)
	if err != nil {
		return
	}
	if len(g.log)+len(b)+1 > MaxLogBytes {
		g.dropped++
		return
	}
	g.log = append(append(g.log, b...), '\n')
}

func (g *Gateway) appendLocked(v any) {
	b, _ := json.Marshal(v)
	g.log = append(append(g.log, b...), '\n')
}

// Log is the audit log so far, JSON lines (egress.ReadLog); complete
// after Stop.
func (g *Gateway) Log() []byte {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]byte(nil), g.log...)
}

// Stats are the proxy's totals so far: connections and bytes each way.
func (g *Gateway) Stats() proxy.Stats {
	g.mu.Lock()
	p := g.proxy
	g.mu.Unlock()
	if p == nil {
		return proxy.Stats{}
	}
	return p.Stats()
}
