package main

import (
	"context"
	"strings"
	"testing"

	"github.com/agentsandbox/agentsandbox/engine"
	"github.com/agentsandbox/agentsandbox/workflow"
)

// TestKVMWarning: when KVM cannot be used, apply says so for steps that
// would have used it, and stays quiet on hosts that simply have none.
func TestKVMWarning(t *testing.T) {
	wf := func(isos ...workflow.Isolation) *workflow.Workflow {
		w := &workflow.Workflow{}
		for _, iso := range isos {
			w.Steps = append(w.Steps, workflow.Step{Name: "s", Isolation: iso})
		}
		return w
	}
	nested := engine.Host{QEMU: true, Nix: true, KVMReason: "qemu -accel kvm with -cpu host,+x2apic,-sgx failed (exit status 134): failed to set MSR 0x10a to 0x69"}
	noKVM := engine.Host{QEMU: true, Nix: true, KVMReason: "/dev/kvm does not exist"}
	for _, tc := range []struct {
		name     string
		w        *workflow.Workflow
		override workflow.Isolation
		h        engine.Host
		accel    string
		want     string
	}{
		{"vm step, nested KVM", wf(workflow.IsolationVM), "", nested, "auto", "VMs run under software emulation"},
		{"vm step, no KVM", wf(workflow.IsolationNamespace), workflow.IsolationVM, noKVM, "auto", "VMs run under software emulation"},
		{"auto step, nested KVM", wf(workflow.IsolationAuto), "", nested, "auto", "auto steps run in namespace isolation"},
		{"auto step, no /dev/kvm", wf(workflow.IsolationAuto), "", noKVM, "auto", ""},
		{"namespace only", wf(workflow.IsolationNamespace), "", nested, "auto", ""},
		{"forced tcg says nothing more", wf(workflow.IsolationVM), "", nested, "tcg", ""},
		{"KVM works", wf(workflow.IsolationVM), "", engine.Host{QEMU: true, KVMUsable: true}, "auto", ""},
	} {
		got := kvmWarning(tc.w, tc.override, tc.h, tc.accel)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: warning %q, want %q", tc.name, got, tc.want)
		}
		if got != "" && !strings.Contains(got, tc.h.KVMReason) {
			t.Errorf("%s: warning %q does not say why", tc.name, got)
		}
	}
}

// TestAccelOverride: --accel tcg and kvm decide without probing; a bad
// value is a usage error that names the environment variable too.
func TestAccelOverride(t *testing.T) {
	ctx := context.Background()
	if ok, why := kvmProbeFor("tcg")(ctx); ok || !strings.Contains(why, "--accel tcg") {
		t.Errorf("tcg: %v, %q", ok, why)
	}
	if ok, _ := kvmProbeFor("kvm")(ctx); !ok {
		t.Error("kvm: not usable")
	}
	t.Setenv(accelEnv, "fast")
	code, _, stderr := execute(t, "apply", "../../examples/hello.yaml")
	if code != ExitInvalid || !strings.Contains(stderr, "AGENTSANDBOX_ACCEL") {
		t.Errorf("apply with AGENTSANDBOX_ACCEL=fast: exit %d, %s", code, stderr)
	}
}
