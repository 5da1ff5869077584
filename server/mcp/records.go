package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentsandbox/agentsandbox/record"
	"github.com/agentsandbox/agentsandbox/sandboxes"
)

// Record resources' URIs.
const (
	RecordsURI        = "agentsandbox://records"
	RecordURIPrefix   = RecordsURI + "/"
	RecordURITemplate = RecordURIPrefix + "{id}"
)

// MaxListedRecords bounds the records the list resource shows, newest
// first.
const MaxListedRecords = 100

// RecordSummary is one record of the list resource.
type RecordSummary struct {
	ID         string `json:"id"`
	URI        string `json:"uri"`
	Workflow   string `json:"workflow,omitempty"`
	Status     string `json:"status,omitempty"`
	Started    string `json:"started,omitempty"`
	DurationMS int64  `json:"durationMs"`
	// Problem is why the record could not be read.
	Problem string `json:"problem,omitempty"`
}

// caller is ctx's identity (the server's caller, or Options.Identity),
// sandboxes.Operator without one.
func caller(ctx context.Context) sandboxes.Identity {
	if id, ok := sandboxes.IdentityFrom(ctx); ok {
		return id
	}
	return sandboxes.Operator
}

func registerRecords(s *sdk.Server, store *record.Store) {
	s.AddResource(&sdk.Resource{URI: RecordsURI, Name: "records", Title: "Recent execution records",
		Description: fmt.Sprintf("The %d newest execution records of yours (of killed sandboxes and workflow runs), newest first: id, workflow, status, start and duration. Read one as %s.", MaxListedRecords, RecordURITemplate),
		MIMEType:    "application/json"},
		func(ctx context.Context, req *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
			list, err := store.List()
			if err != nil {
				return nil, fmt.Errorf("list records in %s: %w", store.Dir(), err)
			}
			// Only the caller's records (an admin's: all).
			who := caller(ctx)
			list = slices.DeleteFunc(list, func(r record.Summary) bool { return !who.Owns(r.Owner) })
			out := struct {
				Records []RecordSummary `json:"records"`
			}{Records: []RecordSummary{}}
			for _, r := range list[:min(len(list), MaxListedRecords)] {
				rs := RecordSummary{ID: r.ID.String(), URI: RecordURIPrefix + r.ID.String(), Workflow: r.Workflow,
					Status: string(r.Status), Started: rfc3339(r.Started), DurationMS: r.Duration.Milliseconds(), Problem: r.Problem}
				out.Records = append(out.Records, rs)
			}
			b, err := json.Marshal(out)
			if err != nil {
				return nil, err
			}
			return &sdk.ReadResourceResult{Contents: []*sdk.ResourceContents{{URI: RecordsURI, MIMEType: "application/json", Text: string(b)}}}, nil
		})
	s.AddResourceTemplate(&sdk.ResourceTemplate{URITemplate: RecordURITemplate, Name: "record", Title: "Execution record",
		Description: "An execution record as JSON (canonical, content-addressed: its id is the hash of these bytes): every command run and file written in a sandbox, or every step of a workflow run. {id} is the id kill returns, or a unique prefix of it.",
		MIMEType:    "application/json"},
		func(ctx context.Context, req *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
			uri := req.Params.URI
			prefix, ok := strings.CutPrefix(uri, RecordURIPrefix)
			if !ok || prefix == "" || strings.Contains(prefix, "/") {
				return nil, sdk.ResourceNotFoundError(uri)
			}
			// Another identity's record is not found, and a prefix is
			// resolved among the caller's own only.
			who := caller(ctx)
			var keep func(record.ID) bool
			if !who.Admin {
				keep = func(id record.ID) bool {
					r, err := store.Get(id)
					return err == nil && who.Owns(r.Owner)
				}
			}
			id, err := store.ResolveAmong(prefix, keep)
			if errors.Is(err, record.ErrNotFound) {
				return nil, sdk.ResourceNotFoundError(uri)
			}
			if err != nil {
				return nil, err
			}
			b, err := store.GetRaw(id)
			if err != nil {
				return nil, err
			}
			return &sdk.ReadResourceResult{Contents: []*sdk.ResourceContents{{URI: RecordURIPrefix + id.String(), MIMEType: "application/json", Text: string(b)}}}, nil
		})
}
