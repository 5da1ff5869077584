# A team's own rules, as they would sit in .agentsandbox/policy/ next to a
# workflow. Its own package keeps its helper names apart from the default
# policy's; its deny and warn join the decision all the same.
package agentsandbox.team

# Hosts a step may reach; data.team.egress_hosts replaces the list.
default allowed_hosts := {"cache.nixos.org", "github.com"}

allowed_hosts := {h | some h in hosts} if hosts := data.team.egress_hosts

deny contains msg if {
	some step in input.workflow.steps
	some entry in step.network.allow
	host := split(entry, ":")[0]
	not host in allowed_hosts
	msg := sprintf("step %q: network.allow %q is not on the team's host list", [step.name, entry])
}

warn contains msg if {
	not input.host.kvm
	msg := "host: no KVM, so isolation auto runs steps in namespaces"
}
