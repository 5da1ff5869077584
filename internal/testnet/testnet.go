// Package testnet is a small internet for tests of the step's egress: a
// network namespace that holds the addresses of a few made-up servers
// (documentation ranges, and the cloud metadata address), an HTTP server
// on port 80 and a TLS server on port 443 on all of them, and the names
// that point at them.
//
// A proxy under test runs on the host and reaches this internet through
// Dial, which makes its socket inside the namespace; nothing touches the
// host's network. Only tests may import it (the layering test enforces
// that), and it needs root (testtier.Root).
package testnet

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"errors"
	"fmt"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentsandbox/agentsandbox/internal/testtier"
	"github.com/agentsandbox/agentsandbox/netns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// The internet's addresses.
var (
	API      = netip.MustParseAddr("203.0.113.10")    // api.example.test
	Data     = netip.MustParseAddr("203.0.113.11")    // data.example.test
	Evil     = netip.MustParseAddr("198.51.100.7")    // evil.example.test
	Metadata = netip.MustParseAddr("169.254.169.254") // meta.example.test, the cloud metadata address
	API6     = netip.MustParseAddr("2001:db8::10")    // api.example.test, IPv6
)

// Names is the internet's name table: every name the servers' certificate
// covers, and the addresses it resolves to.
var Names = map[string][]netip.Addr{
	"api.example.test":  {API, API6},
	"data.example.test": {Data},
	"evil.example.test": {Evil},
	"meta.example.test": {Metadata},
	"v6.example.test":   {API6},
}

// The servers' ports, on every address.
const (
	HTTPPort = 80
	TLSPort  = 443
)

// Request is one request a server answered.
type Request struct {
	Method, Host, Path string
	Local              netip.AddrPort // the address and port it arrived on
	TLS                bool
	ServerName         string // TLS SNI
}

// Internet is a running internet in its own network namespace.
type Internet struct {
	// NS is the internet's namespace.
	NS *netns.NS
	// RootCAs holds the self-signed certificate of the TLS server.
	RootCAs *x509.CertPool

	mu       sync.Mutex
	requests []Request
}

// New starts an internet; t.Cleanup stops it and deletes its namespace.
func New(t testing.TB) *Internet {
	t.Helper()
	testtier.Root(t)
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	ns, err := netns.Create(netns.Prefix + "tnet-" + hex.EncodeToString(b))
	if err != nil {
		t.Fatalf("testnet: %v", err)
	}
	t.Cleanup(func() {
		if err := ns.Delete(); err != nil {
			t.Errorf("testnet: %v", err)
		}
	})
	if err := addAddrs(ns); err != nil {
		t.Fatalf("testnet: %v", err)
	}
	cert, pool, err := selfSigned()
	if err != nil {
		t.Fatalf("testnet: %v", err)
	}
	in := &Internet{NS: ns, RootCAs: pool}

	// Handshake errors (a test sending plain HTTP to the TLS port on
	// purpose) belong to the test's log, not the process's stderr.
	srv := &http.Server{Handler: http.HandlerFunc(in.serve), ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: log.New(testLogWriter{t}, "testnet: ", 0)}
	srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}}
	plain, err := ns.Listen("tcp", ":"+strconv.Itoa(HTTPPort))
	if err != nil {
		t.Fatalf("testnet: %v", err)
	}
	secure, err := ns.Listen("tcp", ":"+strconv.Itoa(TLSPort))
	if err != nil {
		plain.Close()
		t.Fatalf("testnet: %v", err)
	}
	go srv.Serve(plain)
	go srv.Serve(tls.NewListener(secure, srv.TLSConfig))
	t.Cleanup(func() { srv.Close() })
	return in
}

// addAddrs puts every address of the internet on the namespace's lo.
func addAddrs(ns *netns.NS) error {
	h, err := ns.Handle()
	if err != nil {
		return err
	}
	defer h.Close()
	lo, err := h.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("find lo in netns %q: %w", ns.Name(), err)
	}
	for _, a := range []netip.Addr{API, Data, Evil, Metadata, API6} {
		addr := &netlink.Addr{IPNet: &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(a.BitLen(), a.BitLen())}, Flags: unix.IFA_F_NODAD}
		if err := h.AddrAdd(lo, addr); err != nil {
			return fmt.Errorf("add %s to lo in netns %q: %w", a, ns.Name(), err)
		}
	}
	return nil
}

// selfSigned makes the TLS server's certificate, for every name and
// address of the internet, and a pool that trusts it.
func selfSigned() (tls.Certificate, *x509.CertPool, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("generate the TLS key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "testnet"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	for name := range Names {
		tmpl.DNSNames = append(tmpl.DNSNames, name)
	}
	sort.Strings(tmpl.DNSNames)
	for _, a := range []netip.Addr{API, Data, Evil, Metadata, API6} {
		tmpl.IPAddresses = append(tmpl.IPAddresses, a.AsSlice())
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("make the TLS certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("parse the TLS certificate: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool, nil
}

// serve answers every request with one line naming what it saw:
// "testnet METHOD HOST PATH LOCAL". GET /bytes/N answers N bytes of 'x'
// instead.
func (in *Internet) serve(w http.ResponseWriter, r *http.Request) {
	local, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	var lap netip.AddrPort
	if local != nil {
		lap, _ = netip.ParseAddrPort(local.String())
		lap = netip.AddrPortFrom(lap.Addr().Unmap(), lap.Port())
	}
	req := Request{Method: r.Method, Host: r.Host, Path: r.URL.Path, Local: lap, TLS: r.TLS != nil}
	if r.TLS != nil {
		req.ServerName = r.TLS.ServerName
	}
	in.mu.Lock()
	in.requests = append(in.requests, req)
	in.mu.Unlock()
	if n, ok := strings.CutPrefix(r.URL.Path, "/bytes/"); ok {
		size, err := strconv.Atoi(n)
		if err != nil || size < 0 || size > 1<<30 {
			http.Error(w, "testnet: /bytes/N takes 0 to 1073741824", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(size))
		chunk := []byte(strings.Repeat("x", 32<<10))
		for size > 0 {
			k := min(size, len(chunk))
			if _, err := w.Write(chunk[:k]); err != nil {
				return
			}
			size -= k
		}
		return
	}
	fmt.Fprintf(w, "testnet %s %s %s %s\n", r.Method, r.Host, r.URL.Path, lap)
}

// Requests returns the requests answered so far, oldest first.
func (in *Internet) Requests() []Request {
	in.mu.Lock()
	defer in.mu.Unlock()
	return append([]Request(nil), in.requests...)
}

// Resolve looks host up in Names; an address literal resolves to itself.
// An unknown name is a *net.DNSError with IsNotFound set.
func (in *Internet) Resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if a, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		return []netip.Addr{a.Unmap()}, nil
	}
	name := strings.TrimSuffix(strings.ToLower(host), ".")
	addrs, ok := Names[name]
	if !ok {
		return nil, &net.DNSError{Err: "no such host in testnet.Names", Name: host, IsNotFound: true}
	}
	return append([]netip.Addr(nil), addrs...), nil
}

// Dial connects from inside the internet's namespace, as a proxy's
// upstream dialer would from the host: the socket is made in the
// namespace, so the host's network is never used. A name in address is
// resolved with Resolve and its addresses are tried in order.
func (in *Internet) Dial(ctx context.Context, network, address string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return nil, fmt.Errorf("testnet dial %s: %w", address, err)
	}
	addrs, err := in.Resolve(ctx, host)
	if err != nil {
		return nil, fmt.Errorf("testnet dial %s: %w", address, err)
	}
	var errs []error
	for _, a := range addrs {
		var c net.Conn
		err := in.NS.Do(func() error {
			var d net.Dialer
			var err error
			c, err = d.DialContext(ctx, network, net.JoinHostPort(a.String(), port))
			return err
		})
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("testnet dial %s: %w", address, errors.Join(errs...))
}

// Client returns an HTTP client that reaches the internet through Dial and
// trusts its TLS server.
func (in *Internet) Client() *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			DialContext:     in.Dial,
			TLSClientConfig: &tls.Config{RootCAs: in.RootCAs},
		},
		Timeout: 10 * time.Second,
	}
}

// testLogWriter sends a server's error log to the test's log.
type testLogWriter struct{ t testing.TB }

func (w testLogWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}
