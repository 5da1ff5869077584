package mcp_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentsandbox/agentsandbox/internal/managertest"
	"github.com/agentsandbox/agentsandbox/record"
	"github.com/agentsandbox/agentsandbox/sandboxes"
	"github.com/agentsandbox/agentsandbox/server"
	"github.com/agentsandbox/agentsandbox/server/mcp"
)

// Tokens of the identities of TestMCPIdentities.
const (
	tokenA     = "token-of-identity-a-0123456789"
	tokenB     = "token-of-identity-b-0123456789"
	tokenAdmin = "token-of-the-admin-0123456789"
)

// identityClient connects to /mcp of hs with token.
func identityClient(t *testing.T, hs *httptest.Server, token string) *sdk.ClientSession {
	t.Helper()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "0"}, nil).Connect(context.Background(),
		&sdk.StreamableClientTransport{Endpoint: hs.URL + "/mcp", HTTPClient: &http.Client{Transport: bearer{token}}, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func readRecords(t *testing.T, cs *sdk.ClientSession) []string {
	t.Helper()
	res, err := cs.ReadResource(context.Background(), &sdk.ReadResourceParams{URI: mcp.RecordsURI})
	if err != nil {
		t.Fatal(err)
	}
	var list struct{ Records []mcp.RecordSummary }
	if err := json.Unmarshal([]byte(res.Contents[0].Text), &list); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range list.Records {
		ids = append(ids, r.ID)
	}
	slices.Sort(ids)
	return ids
}

// TestMCPIdentities: over the REST server's /mcp, each identity's tools
// and resources see its own sandboxes, snapshots and records only:
// another's are not_found (the same answer as for an id that does not
// exist), a list leaves them out, and an admin sees all. The identity
// reaches the tools through the request's context.
func TestMCPIdentities(t *testing.T) {
	store, err := record.OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	put := func(owner string) record.ID {
		id, err := store.Put(&record.Record{Version: 1, Workflow: record.Workflow{Name: "run-of-" + owner}, Status: record.StatusSucceeded,
			Started: start, Finished: start.Add(time.Second), Inputs: []record.Input{}, Steps: []record.Step{}, Owner: owner})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	recA, recB, recNone := put("a"), put("b"), put("")

	fake := managertest.New(t, sandboxes.Options{})
	ids := []server.Identity{
		{Identity: sandboxes.Identity{Name: "a"}, TokenSHA256: sha256.Sum256([]byte(tokenA))},
		{Identity: sandboxes.Identity{Name: "b"}, TokenSHA256: sha256.Sum256([]byte(tokenB))},
		{Identity: sandboxes.Identity{Name: "ops", Admin: true}, TokenSHA256: sha256.Sum256([]byte(tokenAdmin))},
	}
	srv, err := server.New(server.Options{Manager: fake, Identities: ids, Version: "test",
		Extra: map[string]http.Handler{"/mcp": mcp.HTTPHandler(mcp.New(fake, "test", mcp.Options{Records: store}))}})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		hs.Close()
		fake.Close(context.Background())
	})
	a, b, admin := identityClient(t, hs, tokenA), identityClient(t, hs, tokenB), identityClient(t, hs, tokenAdmin)

	sbA, _ := call[mcp.Sandbox](t, a, "sandbox_create", map[string]any{"labels": map[string]string{"who": "a"}})
	if sbA.Owner != "a" {
		t.Errorf("a's sandbox is owned by %q", sbA.Owner)
	}
	call[mcp.File](t, a, "write_file", map[string]any{"sandbox_id": sbA.ID, "path": "secret.txt", "content": "A's secret"})
	x, _ := call[mcp.ExecResult](t, a, "exec", map[string]any{"sandbox_id": sbA.ID, "argv": []string{"cat", "secret.txt"}})
	snapA, _ := call[mcp.Snapshot](t, a, "snapshot", map[string]any{"sandbox_id": sbA.ID})
	sbB, _ := call[mcp.Sandbox](t, b, "sandbox_create", nil)

	// B: A's sandbox and snapshot do not exist.
	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{"exec", map[string]any{"sandbox_id": sbA.ID, "argv": []string{"cat", "secret.txt"}}},
		{"exec_output", map[string]any{"sandbox_id": sbA.ID, "exec_id": x.ExecID}},
		{"read_file", map[string]any{"sandbox_id": sbA.ID, "path": "secret.txt"}},
		{"write_file", map[string]any{"sandbox_id": sbA.ID, "path": "x", "content": "y"}},
		{"list_files", map[string]any{"sandbox_id": sbA.ID}},
		{"snapshot", map[string]any{"sandbox_id": sbA.ID}},
		{"list_snapshots", map[string]any{"sandbox_id": sbA.ID}},
		{"restore", map[string]any{"sandbox_id": sbA.ID, "snapshot": snapA.ID}},
		{"restore", map[string]any{"sandbox_id": sbB.ID, "snapshot": snapA.ID}},
		{"sandbox_create", map[string]any{"from_snapshot": snapA.ID}},
		{"kill", map[string]any{"sandbox_id": sbA.ID}},
	} {
		msg := callErr(t, b, c.tool, c.args, sandboxes.CodeNotFound)
		if strings.Contains(msg, "A's secret") {
			t.Errorf("B's %s shows A's file: %s", c.tool, msg)
		}
	}
	if l, _ := call[mcp.SandboxList](t, b, "list_sandboxes", nil); len(l.Sandboxes) != 1 || l.Sandboxes[0].ID != sbB.ID {
		t.Errorf("B lists %+v, want its own sandbox only", l.Sandboxes)
	}
	if l, _ := call[mcp.SandboxList](t, b, "list_sandboxes", map[string]any{"labels": map[string]string{"who": "a"}}); len(l.Sandboxes) != 0 {
		t.Errorf("B lists A's sandbox by its label: %+v", l.Sandboxes)
	}
	// B's records: its own; A's and the ownerless one are not found, by
	// id or by a prefix.
	if got, want := readRecords(t, b), []string{recB.String()}; !slices.Equal(got, want) {
		t.Errorf("B's records resource lists %v, want %v", got, want)
	}
	for _, uri := range []string{recA.String(), recA.String()[:6], recNone.String()} {
		if _, err := b.ReadResource(context.Background(), &sdk.ReadResourceParams{URI: mcp.RecordURIPrefix + uri}); err == nil {
			t.Errorf("B read the record %s of another", uri)
		}
	}
	if _, err := b.ReadResource(context.Background(), &sdk.ReadResourceParams{URI: mcp.RecordURIPrefix + recB.String()[:6]}); err != nil {
		t.Errorf("B's own record by a prefix: %v", err)
	}

	// A still has everything; the admin sees all and acts on A's.
	if f, _ := call[mcp.FileContent](t, a, "read_file", map[string]any{"sandbox_id": sbA.ID, "path": "secret.txt"}); f.Content != "A's secret" {
		t.Errorf("A reads %q", f.Content)
	}
	if l, _ := call[mcp.SandboxList](t, admin, "list_sandboxes", nil); len(l.Sandboxes) != 2 {
		t.Errorf("the admin lists %+v, want both sandboxes", l.Sandboxes)
	}
	if got := readRecords(t, admin); len(got) != 3 {
		t.Errorf("the admin's records resource lists %v, want all three", got)
	}
	call[mcp.Sandbox](t, admin, "sandbox_create", map[string]any{"from_snapshot": snapA.ID})
	if k, _ := call[mcp.Sandbox](t, admin, "kill", map[string]any{"sandbox_id": sbA.ID}); k.State != "stopped" {
		t.Errorf("the admin's kill of A's sandbox: %+v", k)
	}
}

// TestMCPOptionsIdentity: Options.Identity is the caller of requests
// without one (stdio's: whoever started the process).
func TestMCPOptionsIdentity(t *testing.T) {
	user := sandboxes.Identity{Name: "uid-1000"}
	cs, fake := connect(t, mcp.Options{Identity: &user})
	other, err := fake.Create(context.Background(), sandboxes.Spec{}) // the operator's
	if err != nil {
		t.Fatal(err)
	}
	sb, _ := call[mcp.Sandbox](t, cs, "sandbox_create", nil)
	if info, err := fake.Get(context.Background(), sb.ID); err != nil || info.Owner != "uid-1000" {
		t.Errorf("the sandbox the stdio caller made: %+v %v, want it owned by uid-1000", info, err)
	}
	callErr(t, cs, "kill", map[string]any{"sandbox_id": other.ID}, sandboxes.CodeNotFound)
}
