package testnet

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestInternet(t *testing.T) {
	in := New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	hc := in.Client()
	for _, tc := range []struct {
		url, want string
	}{
		{"http://api.example.test/x", "testnet GET api.example.test /x 203.0.113.10:80\n"},
		{"https://data.example.test/y", "testnet GET data.example.test /y 203.0.113.11:443\n"},
		{"https://evil.example.test/", "testnet GET evil.example.test / 198.51.100.7:443\n"},
		{"http://meta.example.test/latest", "testnet GET meta.example.test /latest 169.254.169.254:80\n"},
		{"https://v6.example.test/z", "testnet GET v6.example.test /z [2001:db8::10]:443\n"},
		{"https://203.0.113.10/ip", "testnet GET 203.0.113.10 /ip 203.0.113.10:443\n"},
	} {
		req, _ := http.NewRequestWithContext(ctx, "GET", tc.url, nil)
		resp, err := hc.Do(req)
		if err != nil {
			t.Errorf("GET %s: %v", tc.url, err)
			continue
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || string(body) != tc.want {
			t.Errorf("GET %s = %q, %v; want %q", tc.url, body, err, tc.want)
		}
	}
	reqs := in.Requests()
	if len(reqs) != 6 || !reqs[1].TLS || reqs[1].ServerName != "data.example.test" || reqs[0].TLS {
		t.Errorf("requests = %+v", reqs)
	}

	resp, err := hc.Get("http://data.example.test/bytes/100000")
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil || n != 100000 {
		t.Errorf("/bytes/100000 gave %d bytes, %v", n, err)
	}

	// A raw TLS dial checks the certificate against RootCAs by name.
	c, err := in.Dial(ctx, "tcp", "api.example.test:443")
	if err != nil {
		t.Fatal(err)
	}
	tc := tls.Client(c, &tls.Config{ServerName: "api.example.test", RootCAs: in.RootCAs})
	if err := tc.HandshakeContext(ctx); err != nil {
		t.Errorf("TLS handshake with api.example.test: %v", err)
	}
	tc.Close()

	if _, err := in.Resolve(ctx, "nowhere.example.test"); !isNotFound(err) {
		t.Errorf("Resolve of an unknown name = %v, want not found", err)
	}
	if got, err := in.Resolve(ctx, "API.example.test."); err != nil || len(got) != 2 || got[1] != netip.MustParseAddr("2001:db8::10") {
		t.Errorf("Resolve(API.example.test.) = %v, %v", got, err)
	}

	// The servers are not on the host: the host's own network does not
	// hold these addresses.
	if ifaces, err := net.InterfaceAddrs(); err == nil {
		for _, a := range ifaces {
			if strings.HasPrefix(a.String(), "203.0.113.") {
				t.Errorf("the host has %s", a)
			}
		}
	}
}

func isNotFound(err error) bool {
	var de *net.DNSError
	return errors.As(err, &de) && de.IsNotFound
}
