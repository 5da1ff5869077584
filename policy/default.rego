# The default admission policy of agentsandbox: least privilege unless the
# policy data says otherwise. Every threshold and switch comes from
# data.agentsandbox (defaults in default_data.json, documented in
# docs/policy.md), so a team changes them with --policy-data instead of
# forking this file.
#
# Input: {"workflow": <canonical workflow>, "host": <host facts>}.
# Messages name the step (or input) and the field, so a person can fix the
# workflow from the message alone.
package agentsandbox

# Settings. Load merges default_data.json under the user's data, so these
# are normally set; the defaults here only matter when the policy is used
# without that data (for example from a test that replaces data.agentsandbox).
default cfg_ceilings := {}

cfg_ceilings := data.agentsandbox.ceilings

default cfg_open_egress := ["*", "0.0.0.0/0", "::/0"]

cfg_open_egress := data.agentsandbox.open_egress

default cfg_require_egress_port := true

cfg_require_egress_port := data.agentsandbox.require_egress_port

default cfg_require_pinned_nixpkgs := true

cfg_require_pinned_nixpkgs := data.agentsandbox.require_pinned_nixpkgs

default cfg_require_pinned_inputs := true

cfg_require_pinned_inputs := data.agentsandbox.require_pinned_inputs

default cfg_allow_namespace_egress := false

cfg_allow_namespace_egress := data.agentsandbox.allow_namespace_egress

default cfg_warn_no_timeout := true

cfg_warn_no_timeout := data.agentsandbox.warn_no_timeout

default cfg_warn_needed_without_outputs := true

cfg_warn_needed_without_outputs := data.agentsandbox.warn_needed_without_outputs

# ---- network egress --------------------------------------------------------

# allow_host_port splits a canonical network.allow entry into [host, port];
# port is "" when the entry has none. Forms: "*", "host", "host:port",
# "CIDR:port", "[IPv6]:port", "[IPv6/len]:port", bare IPv6 addresses.
allow_host_port(entry) := [host, port] if {
	startswith(entry, "[")
	end := indexof(entry, "]")
	host := substring(entry, 1, end - 1)
	rest := substring(entry, end + 1, -1)
	port := trim_prefix(rest, ":")
}

allow_host_port(entry) := [entry, ""] if {
	not startswith(entry, "[")
	count(indexof_n(entry, ":")) > 1
}

allow_host_port(entry) := [parts[0], parts[1]] if {
	not startswith(entry, "[")
	count(indexof_n(entry, ":")) == 1
	parts := split(entry, ":")
}

allow_host_port(entry) := [entry, ""] if {
	not contains(entry, ":")
}

open_egress_hosts := {h | some h in cfg_open_egress}

deny contains msg if {
	some step in input.workflow.steps
	some entry in step.network.allow
	[host, _] := allow_host_port(entry)
	host in open_egress_hosts
	msg := sprintf("step %q: network.allow %q opens all egress; list the hosts or prefixes the step needs", [step.name, entry])
}

deny contains msg if {
	cfg_require_egress_port
	some step in input.workflow.steps
	some entry in step.network.allow
	[host, port] := allow_host_port(entry)
	port == ""
	not host in open_egress_hosts
	msg := sprintf("step %q: network.allow %q has no port; allow one port per entry, such as \"%s:443\"", [step.name, entry, entry])
}

# ---- pinned sources --------------------------------------------------------

full_commit(s) if regex.match(`^[0-9a-f]{40}$`, s)

deny contains msg if {
	cfg_require_pinned_nixpkgs
	nixpkgs := input.workflow.nixpkgs
	not nixpkgs_pinned(nixpkgs)
	msg := sprintf("nixpkgs.ref %q is not pinned to a full 40-hex commit; use a ref such as \"github:NixOS/nixpkgs/<commit>\"", [nixpkgs.ref])
}

nixpkgs_pinned(nixpkgs) if {
	full_commit(nixpkgs.rev)
	contains(nixpkgs.ref, nixpkgs.rev)
}

deny contains msg if {
	cfg_require_pinned_inputs
	some inp in input.workflow.inputs
	inp.kind in {"file", "http"}
	not regex.match(`^[0-9a-f]{64}$`, object.get(inp, "sha256", ""))
	msg := sprintf("input %q: sha256 is missing; pin %s inputs by the sha256 of their content", [inp.name, inp.kind])
}

deny contains msg if {
	cfg_require_pinned_inputs
	some inp in input.workflow.inputs
	inp.kind == "git"
	not full_commit(object.get(inp, "commit", ""))
	msg := sprintf("input %q: commit is missing or not a full 40-hex commit; pin git inputs by commit", [inp.name])
}

# ---- resource ceilings -----------------------------------------------------

# ceiling converts a ceiling from data to the canonical unit of its resource
# field: numbers are taken as they are; strings are parsed ("64GiB", "24h").
ceiling(_, v) := v if is_number(v)

ceiling(field, v) := units.parse_bytes(v) if {
	is_string(v)
	field in {"memory", "disk"}
}

ceiling("timeoutMs", v) := time.parse_duration_ns(v) / 1000000 if is_string(v)

ceiling("bandwidth", v) := units.parse(v) if is_string(v)

ceiling(field, v) := to_number(v) if {
	is_string(v)
	not field in {"memory", "disk", "timeoutMs", "bandwidth"}
}

deny contains msg if {
	some field, raw in cfg_ceilings
	limit := ceiling(field, raw)
	some step in input.workflow.steps
	value := object.get(step.resources, field, 0)
	value > limit
	msg := sprintf("step %q: resources.%s %v is above the ceiling %v (data.agentsandbox.ceilings.%s)", [step.name, field, value, limit, field])
}

# ---- isolation -------------------------------------------------------------

# effective_isolation is what "auto" becomes on this host: vm where Nix and a
# working KVM are present, else namespace.
effective_isolation(step) := step.isolation if step.isolation != "auto"

effective_isolation(step) := "vm" if {
	step.isolation == "auto"
	input.host.kvm
	input.host.nix
}

effective_isolation(step) := "namespace" if {
	step.isolation == "auto"
	not host_has_vm
}

host_has_vm if {
	input.host.kvm
	input.host.nix
}

deny contains msg if {
	not cfg_allow_namespace_egress
	some step in input.workflow.steps
	count(step.network.allow) > 0
	effective_isolation(step) == "namespace"
	msg := sprintf("step %q: network.allow gives egress to a step under %s; namespace isolation shares the host kernel, so this needs isolation vm or data.agentsandbox.allow_namespace_egress", [step.name, isolation_phrase(step)])
}

isolation_phrase(step) := "isolation namespace" if step.isolation == "namespace"

isolation_phrase(step) := "isolation auto, which is namespace on this host (no KVM or no Nix)" if step.isolation == "auto"

# ---- warnings --------------------------------------------------------------

warn contains msg if {
	cfg_warn_no_timeout
	some step in input.workflow.steps
	object.get(step.resources, "timeoutMs", 0) == 0
	msg := sprintf("step %q: resources.timeoutMs is not set, so the step may run forever; set a timeout", [step.name])
}

warn contains msg if {
	cfg_warn_needed_without_outputs
	some step in input.workflow.steps
	count(object.get(step, "outputs", [])) == 0
	needers := sort([other.name |
		some other in input.workflow.steps
		step.name in other.needs
	])
	count(needers) > 0
	msg := sprintf("step %q: outputs is empty but %s needs it; declare the outputs the later steps use", [step.name, concat(", ", [sprintf("%q", [n]) | some n in needers])])
}
