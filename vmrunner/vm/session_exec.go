package vm

import "github.com/agentsandbox/agentsandbox/vmrunner"

// Exec is one command of a VM session: one connection of the session
// protocol over its own guest/mux stream of the VM's session channel
// (vmrunner.ConnExec, which the namespace backend's sessions use too).
type Exec = vmrunner.ConnExec
