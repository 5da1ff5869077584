package mcp

import (
	"context"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentsandbox/agentsandbox/sandboxes"
)

// registerNetwork offers update_network when the manager can change a
// running sandbox's egress.
func (t *tools) registerNetwork(s *sdk.Server) {
	nm, ok := t.m.(sandboxes.NetworkManager)
	if !ok {
		return
	}
	addTool(s, &sdk.Tool{Name: "update_network", Title: "Grant or revoke a sandbox's network access",
		Description: "Change which hosts a running sandbox may reach: grant adds network.allow entries (host:port, *.domain:port or CIDR:port), revoke removes entries it has. The next connection follows the new rules. The server's policy may refuse a grant. Only a sandbox created with network_allow has network to change. Returns the rules now in force.",
		Annotations: &sdk.ToolAnnotations{DestructiveHint: ptr(false), IdempotentHint: true, OpenWorldHint: ptr(true)}},
		func(ctx context.Context, a NetworkArgs) (sandboxes.NetworkInfo, string, error) {
			info, err := nm.UpdateNetwork(ctx, a.SandboxID, sandboxes.NetworkUpdate{Grant: a.Grant, Revoke: a.Revoke})
			if err != nil {
				return sandboxes.NetworkInfo{}, "", err
			}
			text := "network.allow is now: " + strings.Join(info.Allow, ", ")
			if len(info.Allow) == 0 {
				text = "network.allow is now empty: the sandbox reaches nothing"
			}
			return info, text, nil
		})
}

// NetworkArgs are update_network's arguments.
type NetworkArgs struct {
	SandboxID string   `json:"sandbox_id" jsonschema:"the sandbox's id, from sandbox_create"`
	Grant     []string `json:"grant,omitempty" jsonschema:"entries to allow, such as api.example.com:443, *.example.com:443 or 198.51.100.0/24:5432"`
	Revoke    []string `json:"revoke,omitempty" jsonschema:"entries to remove; each must be one the sandbox has"`
}
