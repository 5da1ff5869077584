// Command agentsandbox-guest is the agent, PID 1 of every sandbox: it runs
// the job in CONTROL_DIR/job.json, sends its output to the console and to
// log files in CONTROL_DIR, and writes CONTROL_DIR/result.json (see
// docs/guest-protocol.md).
//
// Usage:
//
//	agentsandbox-guest [CONTROL_DIR]
//
// CONTROL_DIR defaults to /run/agentsandbox. As PID 1 of an initramfs-only
// guest it first sets the guest up (proc, sys, dev, tmp, kernel modules from
// /etc/agentsandbox/modules, the control and workspace shares by tag) and
// powers the machine off afterwards, whatever happens. Otherwise (a NixOS
// systemd service) it runs the job and exits 0 when result.json was written,
// 1 when it could not be, 2 on a usage error.
//
// It is also the init of every namespace jail, in namespace isolation and
// around a VM's hypervisor: the CLI (vmrunner/jail) starts it with the
// hidden argument jailwire.InitArg, and it builds the jail
// (vmrunner/jail/jailinit) and runs the job or the hypervisor there. The
// CLI finds it next to itself, or at $AGENTSANDBOX_AGENT, and the two check
// each other's versions first. It links the init's side only, not the
// parent's: no seccomp compiler, no debug/elf, no compress/... (deps_test.go
// keeps it so), since every package init runs at every step's start.
//
// Build it static: CGO_ENABLED=0 go build ./cmd/agentsandbox-guest.
package main

import (
	"os"
)

func main() {
	os.Exit(agentMain(os.Args[1:]))
}
