package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentsandbox/agentsandbox/record"
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

func registerRecords(s *sdk.Server, store *record.Store) {
	s.AddResource(&sdk.Resource{URI: RecordsURI, Name: "records", Title: "Recent execution records",
		Description: fmt.Sprintf("The %d newest execution records (of killed sandboxes and workflow runs), newest first: id, workflow, status, start and duration. Read one as %s.", MaxListedRecords, RecordURITemplate),
		MIMEType:    "application/json"},
		func(ctx context.Context, req *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
			list, err := store.List()
			if err != nil {
				return nil, fmt.Errorf("list records in %s: %w", store.Dir(), err)
			}
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
			id, err := store.Resolve(prefix)
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
