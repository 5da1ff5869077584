package main

import (
	"context"
	"strings"
	"testing"

	"github.com/agentsandbox/agentsandbox/engine"
	"github.com/agentsandbox/agentsandbox/workflow"
)

// TestAutoIsolationNote: when auto steps run in namespace isolation on a
// host whose /dev/kvm exists but cannot run a guest, apply says so in one
// line with the probe's one-line reason (qemu's own lines are the
// detail); it stays quiet on hosts that simply have no KVM, and says
// nothing of vm steps, whose accelerator the vm backend decides and states.
func TestAutoIsolationNote(t *testing.T) {
	wf := func(isos ...workflow.Isolation) *workflow.Workflow {
		w := &workflow.Workflow{}
		for _, iso := range isos {
			w.Steps = append(w.Steps, workflow.Step{Name: "s", Isolation: iso})
		}
		return w
	}
	nested := engine.Host{QEMU: true, Nix: true, KVMReason: "qemu -accel kvm with -cpu host,+x2apic,-sgx failed (signal: aborted): failed to set MSR 0x10a to 0x69",
		KVMDetail: "qemu-system-x86_64: error: failed to set MSR 0x10a to 0x69 / qemu-system-x86_64: kvm_buf_set_msrs: Assertion failed."}
	noKVM := engine.Host{QEMU: true, Nix: true, KVMReason: "/dev/kvm does not exist"}
	for _, tc := range []struct {
		name     string
		w        *workflow.Workflow
		override workflow.Isolation
		h        engine.Host
		accel    string
		want     string
	}{
		{"auto step, nested KVM", wf(workflow.IsolationAuto), "", nested, "auto", "auto steps run in namespace isolation"},
		{"auto by default, nested KVM", wf(""), "", nested, "auto", "auto steps run in namespace isolation"},
		{"auto step, no /dev/kvm", wf(workflow.IsolationAuto), "", noKVM, "auto", ""},
		{"vm step: the backend's decision", wf(workflow.IsolationVM), "", nested, "auto", ""},
		{"namespace only", wf(workflow.IsolationNamespace), "", nested, "auto", ""},
		{"auto step forced to namespace", wf(workflow.IsolationAuto), workflow.IsolationNamespace, nested, "auto", ""},
		{"software emulation forced", wf(workflow.IsolationAuto), "", nested, "tcg", ""},
		{"KVM works", wf(workflow.IsolationAuto), "", engine.Host{QEMU: true, Nix: true, KVMUsable: true}, "auto", ""},
	} {
		got := autoIsolationNote(tc.w, tc.override, tc.h, tc.accel)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: note %q, want %q", tc.name, got, tc.want)
		}
		if got != "" && (!strings.Contains(got, tc.h.KVMReason) || strings.Contains(got, "Assertion") || strings.Contains(got, "\n")) {
			t.Errorf("%s: note %q: want one line with the probe's reason and without qemu's assertion text", tc.name, got)
		}
	}
}

// TestAccelOverride: --accel tcg and kvm decide without probing; a bad
// value is a usage error that names the environment variable too.
func TestAccelOverride(t *testing.T) {
	ctx := context.Background()
	if a := kvmProbeFor("tcg")(ctx); a.Usable || !strings.Contains(a.Reason, "--accel tcg") {
		t.Errorf("tcg: %+v", a)
	}
	if a := kvmProbeFor("kvm")(ctx); !a.Usable {
		t.Error("kvm: not usable")
	}
	t.Setenv(accelEnv, "fast")
	code, _, stderr := execute(t, "apply", "../../examples/hello.yaml")
	if code != ExitInvalid || !strings.Contains(stderr, "AGENTSANDBOX_ACCEL") {
		t.Errorf("apply with AGENTSANDBOX_ACCEL=fast: exit %d, %s", code, stderr)
	}
}
