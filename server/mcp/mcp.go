package mcp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentsandbox/agentsandbox/record"
	"github.com/agentsandbox/agentsandbox/sandboxes"
)

// DefaultMaxOutputBytes is how much of each output stream, and of a file
// read, a tool result carries by default.
const DefaultMaxOutputBytes = 64 << 10

// ErrorMetaKey is the _meta key of a tool error's details: {"code",
// "message", "decision"}.
const ErrorMetaKey = "agentsandbox/error"

// Options configure the MCP server.
type Options struct {
	// Records, when set, serves the execution records as resources.
	Records *record.Store
	// MaxOutputBytes bounds each of stdout and stderr in an exec's result,
	// and a file read_file returns (default DefaultMaxOutputBytes).
	MaxOutputBytes int
	// Identity, when set, is the caller of every request whose context
	// carries no identity: on stdio, whoever started the process. Over
	// HTTP the REST server puts the authenticated caller on each
	// request's context. Tools and resources act for the caller: what is
	// another identity's is not found (sandboxes.Identity).
	Identity *sandboxes.Identity
}

// New returns an MCP server whose tools act on m. version is what the
// server reports as its implementation's version.
func New(m sandboxes.Manager, version string, o Options) *sdk.Server {
	if o.MaxOutputBytes <= 0 {
		o.MaxOutputBytes = DefaultMaxOutputBytes
	}
	s := sdk.NewServer(&sdk.Implementation{Name: "agentsandbox", Title: "agentsandbox", Version: version}, &sdk.ServerOptions{
		Instructions: instructions,
	})
	if o.Identity != nil {
		who := *o.Identity
		s.AddReceivingMiddleware(func(next sdk.MethodHandler) sdk.MethodHandler {
			return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
				if _, ok := sandboxes.IdentityFrom(ctx); !ok {
					ctx = sandboxes.WithIdentity(ctx, who)
				}
				return next(ctx, method, req)
			}
		})
	}
	t := &tools{m: m, o: o}
	t.register(s)
	if o.Records != nil {
		registerRecords(s, o.Records)
	}
	return s
}

const instructions = `agentsandbox runs commands in isolated sandboxes (namespace jails or microVMs) with quotas and no network unless allowed.
Create a sandbox with sandbox_create, run commands in it with exec (as often as you like: files and state persist between commands), move files with write_file, read_file and list_files (paths relative to the workspace), and kill it when done: kill returns the id of its execution record, which lists every command and file written. snapshot saves the workspace's files; restore rolls back to a snapshot, and sandbox_create's from_snapshot starts a new sandbox from one. run_workflow, where offered, runs a whole agentsandbox workflow (YAML) and returns each step's result and the run's record.
A command that exits non-zero is a normal result: read exit_code and stderr. A tool error starts with its code (not_found, bad_request, conflict, policy_denied, limit_exceeded, ...) and says what to do.`

// HTTPHandler serves s over MCP's streamable HTTP transport, stateless:
// each POST carries its own request, so that no stream outlives it (the
// REST server drains requests on shutdown and bounds each client's).
func HTTPHandler(s *sdk.Server) http.Handler {
	return sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s },
		&sdk.StreamableHTTPOptions{Stateless: true})
}

// ErrorDetails is a tool error's _meta[ErrorMetaKey].
type ErrorDetails struct {
	Code     sandboxes.Code `json:"code"`
	Message  string         `json:"message"`
	Decision string         `json:"decision,omitempty"`
}

// errorResult is the tool result of a failure: its code first in the text
// (a model reads the text), and the details in _meta (a program reads
// those).
func errorResult(err error) *sdk.CallToolResult {
	d := ErrorDetails{Code: sandboxes.CodeOf(err), Message: err.Error()}
	var e *sandboxes.Error
	if errors.As(err, &e) {
		d.Decision = e.Decision
	}
	text := string(d.Code) + ": " + d.Message
	if d.Decision != "" {
		text += " (policy decision " + d.Decision + ")"
	}
	res := &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: text}}}
	res.SetError(err)
	res.Meta = sdk.Meta{ErrorMetaKey: d}
	return res
}

// addTool registers a tool whose arguments are In and whose structured
// result is Out. h returns the result, and optionally a short text for the
// result's content (without one the content is the result as JSON), or an
// error, which becomes a tool error with the error's code.
func addTool[In, Out any](s *sdk.Server, t *sdk.Tool, h func(context.Context, In) (Out, string, error)) {
	// The output schema is given explicitly and the SDK's handler returns
	// `any`, so that an error result carries no structured content (a
	// zero Out would claim to be a result).
	schema, err := jsonschema.For[Out](nil)
	if err != nil {
		panic(fmt.Sprintf("mcp: output schema of tool %s: %v", t.Name, err)) // a bug in this package's types
	}
	t.OutputSchema = schema
	sdk.AddTool(s, t, func(ctx context.Context, _ *sdk.CallToolRequest, in In) (*sdk.CallToolResult, any, error) {
		out, text, err := h(ctx, in)
		if err != nil {
			return errorResult(err), nil, nil
		}
		res := &sdk.CallToolResult{}
		if text != "" {
			res.Content = []sdk.Content{&sdk.TextContent{Text: text}}
		}
		return res, out, nil
	})
}

// parseDuration reads an argument that is a Go duration string ("" is 0).
func parseDuration(arg, s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, sandboxes.Errorf(sandboxes.CodeBadRequest, "%s %q: want a positive duration with a unit, such as \"90s\", \"10m\" or \"1h\"", arg, s)
	}
	return d, nil
}

func ptr[T any](v T) *T { return &v }
