# The default admission policy of agentsandbox: least privilege unless the
# policy data says otherwise. Every threshold and switch comes from
# data.agentsandbox (defaults in default_data.json, documented in
# docs/policy.md), so a team changes them with --policy-data instead of
# forking this file.
#
# Input: {"workflow": <canonical workflow, each step's isolation resolved>,
# "host": <host facts>}.
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

default cfg_allow_namespace_egress := true

cfg_allow_namespace_egress := data.agentsandbox.allow_namespace_egress

default cfg_egress_deny := []

cfg_egress_deny := data.agentsandbox.egress_deny

default cfg_warn_no_timeout := true

cfg_warn_no_timeout := data.agentsandbox.warn_no_timeout

default cfg_warn_needed_without_outputs := true

cfg_warn_needed_without_outputs := data.agentsandbox.warn_needed_without_outputs

# ---- network egress --------------------------------------------------------

# allow_host_port splits a canonical network.allow entry into [host, port];
# port is "" when the entry has none. Forms: "*", "host", "host:port",
# "CIDR:port", "[IPv6]:port", "[IPv6/len]:port", bare IPv6 addresses.
allow_host_port(entry) := [substring(entry, 1, end - 1), trim_prefix(substring(entry, end + 1, -1), ":")] if {
	startswith(entry, "[")
	end := indexof(entry, "]")
} else := [entry, ""] if {
	count(indexof_n(entry, ":")) != 1
} else := split(entry, ":")

# allow_entries are the distinct network.allow entries of all steps, and
# entry_host_port splits each once; workflows repeat few distinct entries.
allow_entries contains entry if {
	some step in input.workflow.steps
	some entry in step.network.allow
}

entry_host_port := {entry: allow_host_port(entry) | some entry in allow_entries}

open_egress_hosts := {h | some h in cfg_open_egress}

open_entries contains entry if {
	some entry, [host, _] in entry_host_port
	host in open_egress_hosts
}

portless_entries contains entry if {
	cfg_require_egress_port
	some entry, [host, ""] in entry_host_port
	not host in open_egress_hosts
}

deny contains msg if {
	count(open_entries) > 0
	some step in input.workflow.steps
	some entry in step.network.allow
	entry in open_entries
	msg := sprintf("step %q: network.allow %q opens all egress; list the hosts or prefixes the step needs", [step.name, entry])
}

deny contains msg if {
	count(portless_entries) > 0
	some step in input.workflow.steps
	some entry in step.network.allow
	entry in portless_entries
	msg := sprintf("step %q: network.allow %q has no port; allow one port per entry, such as \"%s:443\"", [step.name, entry, entry])
}

# Forbidden destinations (data.agentsandbox.egress_deny): a step may not
# ask for a host the list names, a name below a forbidden *.domain, or a
# prefix that overlaps a forbidden one. Each step's proxy and resolver
# also enforce the list on every connection, whatever a rule here misses.
entry_is_ip(host) if contains(host, ":")

entry_is_ip(host) if regex.match(`^[0-9./]+$`, host)

as_cidr(host) := host if contains(host, "/")

else := concat("", [host, "/128"]) if contains(host, ":")

else := concat("", [host, "/32"])

ports_meet(p, q) if p == ""

ports_meet(p, q) if q == ""

ports_meet(p, q) if p == q

forbids(f, entry) if {
	[fh, fp] := allow_host_port(f)
	[h, p] := entry_host_port[entry]
	ports_meet(fp, p)
	forbidden_host(fh, h)
}

forbidden_host(fh, h) if fh == h

forbidden_host(fh, h) if {
	startswith(fh, "*.")
	suffix := substring(fh, 1, -1)
	endswith(trim_prefix(h, "*."), suffix)
}

forbidden_host(fh, h) if {
	startswith(fh, "*.")
	trim_prefix(h, "*.") == substring(fh, 2, -1)
	startswith(h, "*.")
}

forbidden_host(fh, h) if {
	entry_is_ip(fh)
	entry_is_ip(h)
	net.cidr_intersects(as_cidr(fh), as_cidr(h))
}

deny contains msg if {
	count(cfg_egress_deny) > 0
	some step in input.workflow.steps
	some entry in step.network.allow
	some f in cfg_egress_deny
	forbids(f, entry)
	msg := sprintf("step %q: network.allow %q reaches %q, which the policy forbids (data.agentsandbox.egress_deny); remove the entry", [step.name, entry, f])
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

# Bandwidth is bits per second, written like the workflow ("100Mbit",
# "500kbit") or as a plain number with an SI suffix ("100M").
ceiling("bandwidth", v) := units.parse(trim_suffix(v, "bit")) if is_string(v)

# Disk IO rates are bytes per second, written like the workflow's
# ("100MiB/s") or as a size ("100MiB").
io_rate_fields := {"ioReadBps", "ioWriteBps"}

ceiling(field, v) := units.parse_bytes(trim_suffix(v, "/s")) if {
	is_string(v)
	field in io_rate_fields
}

ceiling(field, v) := to_number(v) if {
	is_string(v)
	not field in {"memory", "disk", "timeoutMs", "bandwidth", "ioReadBps", "ioWriteBps"}
}

deny contains msg if {
	some field, raw in cfg_ceilings
	limit := ceiling(field, raw)
	some step in input.workflow.steps
	value := step.resources[field]
	value > limit
	msg := sprintf("step %q: resources.%s %v is above the ceiling %v (data.agentsandbox.ceilings.%s)", [step.name, field, value, limit, field])
}

# A disk IO rate left unlimited (0, or absent from the canonical form) is
# above any ceiling on it.
deny contains msg if {
	some field, raw in cfg_ceilings
	field in io_rate_fields
	limit := ceiling(field, raw)
	some step in input.workflow.steps
	object.get(step.resources, field, 0) == 0
	msg := sprintf("step %q: resources.%s is unlimited, above the ceiling %v (data.agentsandbox.ceilings.%s); set resources.%s", [step.name, field, limit, field, trim_suffix(field, "Bps")])
}

# Bandwidth left unlimited (0) on a step with egress is above any ceiling
# on it. (A step without egress has no bandwidth to limit; a timeout of 0
# only warns, below.)
deny contains msg if {
	limit := ceiling("bandwidth", cfg_ceilings.bandwidth)
	some step in input.workflow.steps
	count(step.network.allow) > 0
	object.get(step.resources, "bandwidth", 0) == 0
	msg := sprintf("step %q: resources.bandwidth is unlimited, above the ceiling %v (data.agentsandbox.ceilings.bandwidth); set resources.bandwidth", [step.name, limit])
}

# ---- ceilings relative to the host -----------------------------------------

# host_ceilings caps vcpu, memory and disk at a multiple of what the host
# has (input.host.capacity: its CPUs, its memory, the space free where
# workspaces live), for the requests of serve's API callers, the only
# admissions that carry the host's capacity. A number is the multiple (1:
# no more than the host has; 0.5: half; 4: overcommit); anything else
# (null, false) turns that ceiling off.
default cfg_host_ceilings := {}

cfg_host_ceilings := data.agentsandbox.host_ceilings

host_figure("vcpu", cap) := cap.cpus

host_figure("memory", cap) := cap.memoryBytes

host_figure("disk", cap) := cap.diskBytes

host_figure_text("vcpu", cap) := sprintf("its %d CPUs", [cap.cpus])

host_figure_text("memory", cap) := sprintf("its memory, %s", [human_bytes(cap.memoryBytes)])

host_figure_text("disk", cap) := sprintf("the space free on %s, %s", [cap.diskPath, human_bytes(cap.diskBytes)])

resource_text("vcpu", v) := sprintf("%d", [v])

resource_text(field, v) := human_bytes(v) if field in {"memory", "disk"}

human_bytes(n) := concat("", [one_decimal(n / 1099511627776), "TiB"]) if {
	n >= 1099511627776
} else := concat("", [one_decimal(n / 1073741824), "GiB"]) if {
	n >= 1073741824
} else := concat("", [one_decimal(n / 1048576), "MiB"]) if {
	n >= 1048576
} else := sprintf("%d bytes", [n])

# one_decimal writes x with one decimal, rounded down (sprintf's %f sees
# whole numbers as integers).
one_decimal(x) := sprintf("%d.%d", [floor(x), floor(x * 10) % 10])

deny contains msg if {
	cap := input.host.capacity
	some field, factor in cfg_host_ceilings
	is_number(factor)
	figure := host_figure(field, cap)
	limit := floor(figure * factor)
	some step in input.workflow.steps
	value := step.resources[field]
	value > limit
	msg := sprintf("step %q: resources.%s %s is above this host's ceiling %s (%v × %s; data.agentsandbox.host_ceilings.%s)", [step.name, field, resource_text(field, value), resource_text(field, limit), factor, host_figure_text(field, cap), field])
}

# ---- isolation -------------------------------------------------------------

# Each step's isolation is the one it runs with: the runner resolves auto
# (and --isolation) before admission, from the facts in input.host and the
# workflow's nixpkgs pin, so no rule here derives it again. A step that is
# not a VM shares the host kernel: a namespace jail, or (only in an input
# that was never resolved) auto, which may become one.
deny contains msg if {
	not cfg_allow_namespace_egress
	some step in input.workflow.steps
	step.isolation != "vm"
	count(step.network.allow) > 0
	msg := sprintf("step %q: network.allow gives egress to a step under isolation %s, and this policy requires vm isolation for egress (data.agentsandbox.allow_namespace_egress is false); set isolation: vm", [step.name, step.isolation])
}

# ---- warnings --------------------------------------------------------------

warn contains msg if {
	cfg_warn_no_timeout
	some step in input.workflow.steps
	step.resources.timeoutMs == 0
	msg := sprintf("step %q: resources.timeoutMs is not set, so the step may run forever; set a timeout", [step.name])
}

warn contains msg if {
	cfg_warn_needed_without_outputs
	some step in input.workflow.steps
	count(step.outputs) == 0
	needers := sort([other.name |
		some other in input.workflow.steps
		step.name in other.needs
	])
	count(needers) > 0
	msg := sprintf("step %q: outputs is empty but %s needs it; declare the outputs the later steps use", [step.name, concat(", ", [sprintf("%q", [n]) | some n in needers])])
}
