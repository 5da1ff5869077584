package e2b

import (
	"net/http"
	"slices"

	"github.com/agentsandbox/agentsandbox/sandboxes"
)

// A sandbox's network, as E2B's create and updateNetwork give it
// (docs/e2b.md): allowOut becomes the sandbox's network.allow, judged by
// the policy as any network.allow is (the Manager's Create and
// UpdateNetwork, sandboxes/network.go), so a refusal is the policy's 403
// with its decision. Everything not allowed is denied, so denyOut says
// nothing more when allowOut is given or the sandbox has no internet.
// allow_internet_access: true with no allowOut asks for open egress:
// openEgress, which the policy's open_egress refuses unless the server's
// policy data opens it.

// sandboxNetwork is E2B's SandboxNetworkConfig, the fields this server
// takes; rules, egressProxy and httpsPorts are refused by decodeBody.
type sandboxNetwork struct {
	AllowOut           []string `json:"allowOut,omitempty"`
	DenyOut            []string `json:"denyOut,omitempty"`
	AllowPublicTraffic *bool    `json:"allowPublicTraffic,omitempty"`
	MaskRequestHost    *string  `json:"maskRequestHost,omitempty"`
}

// networkUpdate is the body of PUT /sandboxes/{id}/network.
type networkUpdate struct {
	AllowOut            []string `json:"allowOut,omitempty"`
	DenyOut             []string `json:"denyOut,omitempty"`
	AllowInternetAccess *bool    `json:"allow_internet_access,omitempty"`
}

// openEgress is the network.allow of allow_internet_access: true without
// allowOut: every IPv4 and IPv6 address on the web's ports.
var openEgress = []string{"0.0.0.0/0:80", "0.0.0.0/0:443", "[::/0]:80", "[::/0]:443"}

// allowList is the network.allow E2B's fields ask for; nil is no network.
func allowList(internet *bool, allowOut, denyOut []string) ([]string, error) {
	switch {
	case len(allowOut) > 0:
		return allowOut, nil
	case internet != nil && *internet:
		if len(denyOut) > 0 {
			return nil, &sandboxes.Error{Code: sandboxes.CodeUnsupport, Message: "denyOut with internet access and no allowOut is not built yet in agentsandbox's E2B transport: a sandbox's egress is an allow list; give allowOut instead (docs/e2b.md)"}
		}
		return slices.Clone(openEgress), nil
	}
	return nil, nil
}

// network sets spec's network from a create's fields.
func (n newSandbox) network(spec *sandboxes.Spec) error {
	var allowOut, denyOut []string
	if net := n.Network; net != nil {
		if net.AllowPublicTraffic != nil && *net.AllowPublicTraffic {
			return &sandboxes.Error{Code: sandboxes.CodeUnsupport, Message: "network.allowPublicTraffic: true is not built yet in agentsandbox's E2B transport: a sandbox's ports other than envd's are not served (docs/e2b.md)"}
		}
		if net.MaskRequestHost != nil {
			return &sandboxes.Error{Code: sandboxes.CodeUnsupport, Message: "network.maskRequestHost is not built yet in agentsandbox's E2B transport: a sandbox's ports other than envd's are not served (docs/e2b.md)"}
		}
		allowOut, denyOut = net.AllowOut, net.DenyOut
	}
	allow, err := allowList(n.AllowInternetAccess, allowOut, denyOut)
	if err != nil || allow == nil {
		return err
	}
	spec.Network = &sandboxes.Network{Allow: allow}
	return nil
}

// updateNetwork answers sandbox.updateNetwork: the sandbox's
// network.allow becomes the one asked for, by the Manager's grants and
// revokes of the difference (each judged by the policy and recorded).
func (s *Service) updateNetwork(w http.ResponseWriter, r *http.Request) error {
	var req networkUpdate
	if err := decodeBody(r, &req); err != nil {
		return err
	}
	id := r.PathValue("id")
	if _, err := s.running(r, id); err != nil {
		return err
	}
	nm, ok := s.m.(sandboxes.NetworkManager)
	if !ok {
		return &sandboxes.Error{Code: sandboxes.CodeUnsupport, Message: "updateNetwork: this server's sandbox manager cannot change a sandbox's network"}
	}
	want, err := allowList(req.AllowInternetAccess, req.AllowOut, req.DenyOut)
	if err != nil {
		return err
	}
	now, err := nm.Network(r.Context(), id)
	if err != nil {
		return err
	}
	var u sandboxes.NetworkUpdate
	for _, e := range now.Allow {
		if !slices.Contains(want, e) {
			u.Revoke = append(u.Revoke, e)
		}
	}
	for _, e := range want {
		if !slices.Contains(now.Allow, e) {
			u.Grant = append(u.Grant, e)
		}
	}
	if len(u.Grant) > 0 || len(u.Revoke) > 0 {
		if _, err := nm.UpdateNetwork(r.Context(), id, u); err != nil {
			return err
		}
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
