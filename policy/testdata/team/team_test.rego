package agentsandbox.team_test

import data.agentsandbox

step(allow) := {
	"name": "fetch",
	"network": {"allow": allow},
	"resources": {"vcpu": 1, "memory": 1073741824, "timeoutMs": 60000},
	"isolation": "vm",
	"outputs": [],
	"needs": [],
}

wf(steps) := {"workflow": {"name": "t", "inputs": [], "steps": steps}, "host": {"kvm": true, "nix": true, "isolation": ["namespace", "vm"], "hypervisors": ["qemu"], "uid": 1000}}

test_listed_host_allowed if {
	count(agentsandbox.team.deny) == 0 with input as wf([step(["github.com:443"])])
}

test_unlisted_host_denied if {
	agentsandbox.team.deny == {`step "fetch": network.allow "example.com:443" is not on the team's host list`} with input as wf([step(["example.com:443"])])
}

test_host_list_from_data if {
	count(agentsandbox.team.deny) == 0 with input as wf([step(["example.com:443"])])
		with data.team.egress_hosts as ["example.com"]
}

# The default policy is loaded too, so team tests can check it with their data.
test_default_policy_denies_open_egress if {
	`step "fetch": network.allow "*" opens all egress; list the hosts or prefixes the step needs` in agentsandbox.deny with input as wf([step(["*"])])
}
