package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/pflag"

	"github.com/agentsandbox/agentsandbox/record"
	"github.com/agentsandbox/agentsandbox/sandboxes"
	"github.com/agentsandbox/agentsandbox/server"
)

// connOptions say where the server of `agentsandbox serve` is, as the
// Python client finds it: the flags, else $AGENTSANDBOX_SOCKET, else
// $AGENTSANDBOX_URL with $AGENTSANDBOX_TOKEN, else the default socket in
// the default state directory.
type connOptions struct {
	Socket    string
	URL       string
	TokenFile string
}

func (o *connOptions) AddFlags(f *pflag.FlagSet) {
	f.StringVar(&o.Socket, "socket", "", "the server's unix socket (default $AGENTSANDBOX_SOCKET, else STATE-DIR/"+socketName+")")
	f.StringVar(&o.URL, "url", "", "the server's TCP address, such as http://127.0.0.1:8723 (default $AGENTSANDBOX_URL)")
	f.StringVar(&o.TokenFile, "token-file", "", "file holding your identity's token for --url (default $AGENTSANDBOX_TOKEN)")
}

// apiClient talks to the server; it is thin on purpose: the JSON is
// package sandboxes' and server's types.
type apiClient struct {
	hc    *http.Client
	base  string // http://sandbox for the socket, the URL for TCP
	token string
	where string // for messages
}

func (o connOptions) client() (*apiClient, error) {
	if o.Socket != "" && o.URL != "" {
		return nil, invalidf("give --socket or --url, not both")
	}
	socket, rawURL := o.Socket, o.URL
	if socket == "" && rawURL == "" {
		socket = os.Getenv("AGENTSANDBOX_SOCKET")
		if socket == "" {
			rawURL = os.Getenv("AGENTSANDBOX_URL")
		}
		if socket == "" && rawURL == "" {
			dir, err := record.DefaultStateDir()
			if err != nil {
				return nil, invalidf("%v; or pass --socket", err)
			}
			socket = filepath.Join(dir, socketName)
		}
	}
	if socket != "" {
		tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		}}
		return &apiClient{hc: &http.Client{Transport: tr}, base: "http://sandbox", where: "unix socket " + socket}, nil
	}
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, invalidf("--url %q: want http://HOST:PORT or https://HOST:PORT", rawURL)
	}
	token := os.Getenv("AGENTSANDBOX_TOKEN")
	if o.TokenFile != "" {
		b, err := os.ReadFile(o.TokenFile)
		if err != nil {
			return nil, invalidf("--token-file: %v", err)
		}
		token = strings.TrimSpace(string(b))
	}
	if token == "" {
		return nil, invalidf("%s needs a token of one of the server's identities: pass --token-file or set AGENTSANDBOX_TOKEN", rawURL)
	}
	return &apiClient{hc: &http.Client{}, base: strings.TrimRight(rawURL, "/"), token: token, where: rawURL}, nil
}

// apiError is an error answer of the server.
type apiError struct {
	Status int
	Body   sandboxes.Error
}

// Error is the server's message, and the decision that refused the
// request if its policy did. Its exit status is answerExit's.
func (e *apiError) Error() string {
	if e.Body.Code == sandboxes.CodeDenied && e.Body.Decision != "" {
		return fmt.Sprintf("%s (decision %s)", e.Body.Message, e.Body.Decision)
	}
	return e.Body.Message
}

// do sends a request and returns the answer if its status is 2xx; any
// other status is an *apiError from the server's JSON error.
func (c *apiClient) do(ctx context.Context, method, path string, q url.Values, body io.Reader, contentType string) (*http.Response, error) {
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("reach the agentsandbox server at %s: %w; start it (sudo agentsandbox serve) or pass --socket or --url", c.where, err)
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var eb server.ErrorBody
	if err := json.Unmarshal(raw, &eb); err != nil || eb.Error.Code == "" {
		return nil, &apiError{Status: resp.StatusCode, Body: sandboxes.Error{Code: sandboxes.CodeInternal,
			Message: fmt.Sprintf("%s %s: the server answered %s without a JSON error: %.200s", method, path, resp.Status, raw)}}
	}
	return nil, &apiError{Status: resp.StatusCode, Body: eb.Error}
}

// json sends in (if not nil) as JSON and decodes a JSON answer into out
// (if not nil).
func (c *apiClient) json(ctx context.Context, method, path string, q url.Values, in, out any) error {
	var body io.Reader
	ct := ""
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body, ct = bytes.NewReader(b), "application/json"
	}
	resp, err := c.do(ctx, method, path, q, body, ct)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%s %s: decode the answer: %w", method, path, err)
	}
	return nil
}

// sandboxPath is /v1/sandboxes/ID followed by the escaped segments.
func sandboxPath(id string, rest ...string) string {
	p := "/v1/sandboxes/" + url.PathEscape(id)
	for _, r := range rest {
		p += "/" + r
	}
	return p
}

// escapePath escapes a workspace path segment by segment.
func escapePath(p string) string {
	segs := strings.Split(p, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return strings.Join(segs, "/")
}
