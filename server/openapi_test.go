package server

import (
	"encoding/json"
	"net/http"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/agentsandbox/agentsandbox/internal/managertest"
	"github.com/agentsandbox/agentsandbox/sandboxes"
)

type openAPIDoc struct {
	OpenAPI    string                               `json:"openapi"`
	Paths      map[string]map[string]map[string]any `json:"paths"`
	Components struct {
		Schemas map[string]struct {
			Properties map[string]any `json:"properties"`
			Required   []string       `json:"required"`
		} `json:"schemas"`
	} `json:"components"`
}

func loadDoc(t *testing.T) openAPIDoc {
	t.Helper()
	var doc openAPIDoc
	dec := json.NewDecoder(strings.NewReader(string(openAPI)))
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("openapi.json is not valid JSON: %v", err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.1.") {
		t.Fatalf("openapi.json: openapi %q, want 3.1.x", doc.OpenAPI)
	}
	return doc
}

var httpMethods = []string{"get", "put", "post", "delete", "patch", "head", "options", "trace"}

// TestRoutesMatchOpenAPI: every registered route is in the document and
// every operation of the document is registered.
func TestRoutesMatchOpenAPI(t *testing.T) {
	doc := loadDoc(t)
	s, err := New(Options{Manager: managertest.New(t, sandboxes.Options{}), Extra: map[string]http.Handler{"/mcp": http.NotFoundHandler()}})
	if err != nil {
		t.Fatal(err)
	}
	var registered, documented []string
	for _, p := range s.patterns {
		// Options.Extra (the MCP endpoint /mcp of package server/mcp)
		// speaks its own protocol, documented in docs/mcp.md, not in
		// openapi.json.
		if slices.Contains(s.extra, p) {
			continue
		}
		method, path, _ := strings.Cut(p, " ")
		registered = append(registered, method+" "+strings.ReplaceAll(path, "...}", "}"))
	}
	for path, item := range doc.Paths {
		for method, op := range item {
			if !slices.Contains(httpMethods, method) {
				continue
			}
			documented = append(documented, strings.ToUpper(method)+" "+path)
			resp, _ := op["responses"].(map[string]any)
			if _, ok := resp["default"]; !ok {
				t.Errorf("openapi.json: %s %s has no default (error) response", strings.ToUpper(method), path)
			}
		}
	}
	for _, r := range registered {
		if !slices.Contains(documented, r) {
			t.Errorf("route %s is registered but not in openapi.json: document it", r)
		}
	}
	for _, d := range documented {
		if !slices.Contains(registered, d) {
			t.Errorf("openapi.json documents %s, which the server does not register", d)
		}
	}
}

// TestSchemasMatchStructs: the schemas' properties are the structs' JSON
// names, so the document cannot drift from sandboxes/api.go.
func TestSchemasMatchStructs(t *testing.T) {
	doc := loadDoc(t)
	types := map[string]any{
		"Spec": sandboxes.Spec{}, "Network": sandboxes.Network{}, "Info": sandboxes.Info{}, "Usage": sandboxes.Usage{},
		"ExecRequest": sandboxes.ExecRequest{}, "ExecEvent": sandboxes.ExecEvent{}, "ExitStatus": sandboxes.ExitStatus{},
		"ExecInfo": sandboxes.ExecInfo{}, "FileInfo": sandboxes.FileInfo{}, "Error": sandboxes.Error{},
		"ErrorBody": ErrorBody{}, "Health": Health{}, "SandboxList": SandboxList{}, "FileList": FileList{},
		"ExtendRequest": ExtendRequest{}, "SignalRequest": SignalRequest{},
		"SnapshotInfo": sandboxes.SnapshotInfo{}, "SnapshotRequest": sandboxes.SnapshotRequest{}, "RestoreRequest": sandboxes.RestoreRequest{}, "SnapshotList": SnapshotList{},
		"RunRequest": sandboxes.RunRequest{}, "RunInfo": sandboxes.RunInfo{}, "RunStep": sandboxes.RunStep{}, "RunOutput": sandboxes.RunOutput{},
		"NetworkInfo": sandboxes.NetworkInfo{}, "NetworkUpdate": sandboxes.NetworkUpdate{},
	}
	for name, v := range types {
		schema, ok := doc.Components.Schemas[name]
		if !ok {
			t.Errorf("openapi.json has no schema %s", name)
			continue
		}
		var fields, required []string
		rt := reflect.TypeOf(v)
		for i := range rt.NumField() {
			f := rt.Field(i)
			tag := f.Tag.Get("json")
			jname, opts, _ := strings.Cut(tag, ",")
			if jname == "-" || !f.IsExported() {
				continue
			}
			if jname == "" {
				jname = f.Name
			}
			fields = append(fields, jname)
			if !strings.Contains(opts, "omitempty") {
				required = append(required, jname)
			}
		}
		var props []string
		for p := range schema.Properties {
			props = append(props, p)
		}
		sort.Strings(fields)
		sort.Strings(props)
		if !slices.Equal(fields, props) {
			t.Errorf("schema %s: properties %v, but the Go struct's JSON fields are %v", name, props, fields)
		}
		// A field without omitempty is always sent: the document says so.
		for _, r := range required {
			if !slices.Contains(schema.Required, r) && !strings.HasSuffix(name, "Request") && name != "Spec" {
				t.Errorf("schema %s: %s is always sent; list it in required", name, r)
			}
		}
		for _, r := range schema.Required {
			if !slices.Contains(fields, r) {
				t.Errorf("schema %s requires %s, which the struct does not have", name, r)
			}
		}
	}
	for name := range doc.Components.Schemas {
		if _, ok := types[name]; !ok && name != "Duration" {
			t.Errorf("openapi.json has a schema %s that no Go type checks: add it to this test", name)
		}
	}
}

// TestExtraConflict: an extra handler whose pattern clashes with a route
// is refused at New, with what to do, not a panic.
func TestExtraConflict(t *testing.T) {
	_, err := New(Options{Manager: managertest.New(t, sandboxes.Options{}), Extra: map[string]http.Handler{"GET /v1/health": http.NotFoundHandler()}})
	if err == nil || !strings.Contains(err.Error(), "choose a pattern") {
		t.Errorf("New with a clashing extra pattern: %v", err)
	}
	_, err = New(Options{Manager: managertest.New(t, sandboxes.Options{}), Extra: map[string]http.Handler{"/mcp": nil}})
	if err == nil {
		t.Error("New with a nil extra handler succeeded")
	}
}
