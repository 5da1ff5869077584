package mcp_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentsandbox/agentsandbox/internal/managertest"
	"github.com/agentsandbox/agentsandbox/sandboxes"
	"github.com/agentsandbox/agentsandbox/server"
	"github.com/agentsandbox/agentsandbox/server/mcp"
)

const testToken = "0123456789abcdef0123456789abcdef"

// serveHTTP serves the REST server with the MCP handler at /mcp, over
// TCP (so the bearer token is needed), on the real manager over the fake
// backend.
func serveHTTP(t *testing.T) *httptest.Server {
	t.Helper()
	fake := managertest.New(t, sandboxes.Options{})
	srv, err := server.New(server.Options{Manager: fake, Token: testToken, Version: "test",
		Extra: map[string]http.Handler{"/mcp": mcp.HTTPHandler(mcp.New(fake, "test", mcp.Options{}))}})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		hs.Close()
		fake.Close(context.Background())
	})
	return hs
}

// bearer adds the token to every request.
type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

func TestMCPStreamableHTTP(t *testing.T) {
	hs := serveHTTP(t)
	ctx := context.Background()
	client := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "0"}, nil)
	cs, err := client.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: hs.URL + "/mcp",
		HTTPClient: &http.Client{Transport: bearer{testToken}}, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	sb, _ := call[mcp.Sandbox](t, cs, "sandbox_create", nil)
	x, _ := call[mcp.ExecResult](t, cs, "exec", map[string]any{"sandbox_id": sb.ID, "argv": []string{"echo", "over", "http"}})
	if x.Stdout != "over http\n" || x.ExitCode != 0 {
		t.Errorf("exec over HTTP: %+v", x)
	}
	callErr(t, cs, "kill", map[string]any{"sandbox_id": "nope"}, sandboxes.CodeNotFound)

	// The REST API is still there beside it.
	req, _ := http.NewRequest("GET", hs.URL+"/v1/sandboxes/"+sb.ID, nil)
	resp, err := (&http.Client{Transport: bearer{testToken}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /v1/sandboxes/%s beside /mcp: %s", sb.ID, resp.Status)
	}
}

// TestMCPHTTPNeedsToken: the REST server's authentication is in front of
// /mcp.
func TestMCPHTTPNeedsToken(t *testing.T) {
	hs := serveHTTP(t)
	for _, tok := range []string{"", "wrong-token-wrong-token"} {
		req, _ := http.NewRequest("POST", hs.URL+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"0"}}}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("POST /mcp with token %q: %s, want 401", tok, resp.Status)
		}
	}
	_, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "0"}, nil).Connect(context.Background(),
		&sdk.StreamableClientTransport{Endpoint: hs.URL + "/mcp", MaxRetries: -1}, nil)
	if err == nil {
		t.Error("an MCP client without the token connected")
	}
}
