package mcp_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentsandbox/agentsandbox/server/mcp"
)

// TestStdioTransportAnswersBeforeEOF: a client that writes its requests
// and closes stdin at once (printf ... | agentsandbox mcp) gets an answer to
// every one, a slow tool call included, and then the server ends.
func TestStdioTransportAnswersBeforeEOF(t *testing.T) {
	srv := sdk.NewServer(&sdk.Implementation{Name: "t", Version: "1"}, nil)
	type in struct{}
	sdk.AddTool(srv, &sdk.Tool{Name: "slow"}, func(ctx context.Context, _ *sdk.CallToolRequest, _ in) (*sdk.CallToolResult, any, error) {
		time.Sleep(300 * time.Millisecond)
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "slow done"}}}, nil, nil
	})
	input := strings.Join([]string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`,
		`{"jsonrpc":"2.0","id":"three","method":"tools/call","params":{"name":"slow","arguments":{}}}`,
	}, "\n") + "\n"
	var out bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- srv.Run(context.Background(), mcp.StdioTransport(strings.NewReader(input), &out)) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the server did not end after answering at EOF")
	}
	for _, want := range []string{`"id":1,"result"`, `"id":2,"result"`, `"id":"three","result"`, "slow done"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %s:\n%s", want, out.String())
		}
	}
}
