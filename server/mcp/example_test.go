package mcp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentsandbox/agentsandbox/internal/managertest"
	"github.com/agentsandbox/agentsandbox/sandboxes"
	"github.com/agentsandbox/agentsandbox/server/mcp"
)

// An agent loop with the Go SDK's client, the model replaced by a script:
// create a sandbox, write a program, run its test, read the failure, fix
// the program, run the test again, and kill the sandbox. A real agent
// would choose each call from the previous results; the calls and the
// results are the same. (The manager here is on the fake backend, which
// runs commands on the host: it is for tests; `agentsandbox mcp` and `serve` run them in sandboxes.)
func Example_agentLoop() {
	dir, err := os.MkdirTemp("", "mcp-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	manager, err := managertest.Open(dir, sandboxes.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer manager.Close(context.Background())

	ctx := context.Background()
	serverT, clientT := sdk.NewInMemoryTransports()
	if _, err := mcp.New(manager, "example", mcp.Options{}).Connect(ctx, serverT, nil); err != nil {
		log.Fatal(err)
	}
	session, err := sdk.NewClient(&sdk.Implementation{Name: "scripted-agent", Version: "0"}, nil).Connect(ctx, clientT, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer session.Close()

	// tool calls a tool and decodes its structured result into out.
	tool := func(name string, args map[string]any, out any) {
		res, err := session.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			log.Fatal(err)
		}
		if res.IsError {
			log.Fatalf("%s: %v", name, res.Content[0].(*sdk.TextContent).Text)
		}
		b, _ := json.Marshal(res.StructuredContent)
		json.Unmarshal(b, out)
	}

	var sb mcp.Sandbox
	tool("sandbox_create", map[string]any{"labels": map[string]string{"task": "fix-add"}}, &sb)
	var f mcp.File
	tool("write_file", map[string]any{"sandbox_id": sb.ID, "path": "add.sh", "content": "echo $(($1 - $2))\n"}, &f)
	test := map[string]any{"sandbox_id": sb.ID, "shell": `got=$(sh add.sh 2 3); [ "$got" = 5 ] || { echo "add 2 3 = $got, want 5" >&2; exit 1; }`}

	for attempt := 1; ; attempt++ {
		var x mcp.ExecResult
		tool("exec", test, &x)
		fmt.Println(strings.TrimSpace(fmt.Sprintf("attempt %d: exit code %d %s", attempt, x.ExitCode, x.Stderr)))
		if x.ExitCode == 0 {
			break
		}
		// The "model" reads stderr and fixes the program.
		tool("write_file", map[string]any{"sandbox_id": sb.ID, "path": "add.sh", "content": "echo $(($1 + $2))\n"}, &f)
	}
	var killed mcp.Sandbox
	tool("kill", map[string]any{"sandbox_id": sb.ID}, &killed)
	fmt.Println("sandbox", killed.State, "with a record:", killed.Record != "")
	// Output:
	// attempt 1: exit code 1 add 2 3 = -1, want 5
	// attempt 2: exit code 0
	// sandbox stopped with a record: true
}
