package jailwire

import "github.com/agentsandbox/agentsandbox/vmrunner/seccomp/compiled"

// ChildConfig is the JSON the parent sends on jail.Process.Release.
type ChildConfig struct {
	RootDir  string    `json:"rootDir"`
	Hostname string    `json:"hostname"`
	Plan     []Mount   `json:"plan"`
	Exec     *ExecSpec `json:"exec,omitempty"`
	Rlimits  Rlimits   `json:"rlimits"`
	// Seccomp is the compiled filter; nil only with jail.Config.NoSeccomp.
	Seccomp compiled.Program `json:"seccomp,omitempty"`
}
