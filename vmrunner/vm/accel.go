// accel.go holds the accelerator decision: KVM or TCG for a runner, made
// once per runner from Options.Accel, how the runner was built and the
// KVM probe (kvm.go), with the start bound that follows from it.

package vm

import (
	"context"
	"fmt"
	"time"

	"github.com/agentsandbox/agentsandbox/vmrunner"
)

// AccelDecision is the accelerator a VM runs with and why, in one line.
// Backend.accel makes it once per runner, from a probe with exactly the
// CPU model and machine that runner passes to qemu; the warning, the
// step's record (StepResult.AccelReason) and a start failure all state it.
type AccelDecision struct {
	Accel  string // "kvm" or "tcg"
	Reason string
}

// accel decides the accelerator for a runner (note: why the realiser built
// it, StepSpec.RunnerNote):
//   - forced by Options.Accel: that one, where the runner can take it;
//   - a runner built for software emulation: TCG, for the realiser's reason;
//   - otherwise KVM where the probe shows KVM runs a guest with the runner's
//     own CPU model and machine, else TCG with a warning. A runner whose
//     target cannot be read is not proven, and gets no other target's
//     answer. A runner built for KVM (microvm.nix bakes -enable-kvm in)
//     cannot fall back: it fails here with what to do instead.
func (b *Backend) accel(ctx context.Context, ri RunnerInfo, note string) (AccelDecision, error) {
	bakedTCG := !ri.AccelFromEnv && ri.BakedAccel == "tcg"
	switch b.opts.Accel {
	case "tcg":
		if ri.AccelFromEnv || bakedTCG {
			return AccelDecision{"tcg", "software emulation forced (--accel tcg or AGENTSANDBOX_ACCEL=tcg)"}, nil
		}
		return AccelDecision{}, fmt.Errorf("runner %s was built for KVM (%s), and software emulation was forced: "+
			"realise the step's software-emulation runner (apply does without --flake; see docs/vm.md), or do not force TCG", ri.Dir, ri.Target)
	case "kvm":
		if !bakedTCG {
			return AccelDecision{"kvm", "KVM forced (--accel kvm), not probed"}, nil
		}
	}
	if bakedTCG {
		if note == "" {
			note = "the runner was built for software emulation"
		}
		return b.decided(AccelDecision{"tcg", note}), nil
	}
	a := b.probe(ctx, ri)
	if a.Usable {
		return AccelDecision{"kvm", a.Reason}, nil
	}
	if ri.AccelFromEnv {
		return b.decided(AccelDecision{"tcg", "KVM cannot run this guest here: " + a.Reason}), nil
	}
	return AccelDecision{}, fmt.Errorf("runner %s was built for KVM, and KVM cannot run its guest here (%s): "+
		"realise the step's software-emulation runner (apply picks it without --flake when KVM fails), or force it with --accel tcg", ri.Dir, a.Reason)
}

// decided warns, once per reason for this backend's life, that VMs run
// under software emulation, and returns d.
func (b *Backend) decided(d AccelDecision) AccelDecision {
	b.mu.Lock()
	defer b.mu.Unlock()
	if d.Accel == "tcg" && !b.warned[d.Reason] {
		if b.warned == nil {
			b.warned = map[string]bool{}
		}
		b.warned[d.Reason] = true
		b.opts.Warn("VMs run under software emulation (TCG), much slower: " + d.Reason)
	}
	return d
}

// probe asks Probe once per target for this backend's life. A runner
// whose target is unknown is answered "not proven" without a probe.
func (b *Backend) probe(ctx context.Context, ri RunnerInfo) vmrunner.KVMAnswer {
	if ri.TargetUnknown != "" {
		return vmrunner.KVMAnswer{Reason: ri.TargetUnknown + ", so KVM is not proven for it"}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if a, ok := b.probed[ri.Target]; ok {
		return a
	}
	a := b.opts.Probe(ctx, ri.Target)
	if ctx.Err() != nil {
		return a // not an answer to keep
	}
	if b.probed == nil {
		b.probed = map[Target]vmrunner.KVMAnswer{}
	}
	b.probed[ri.Target] = a
	return a
}

// accelOf is the accelerator decision a result holds.
func accelOf(res vmrunner.StepResult) AccelDecision {
	return AccelDecision{Accel: res.Accel, Reason: res.AccelReason}
}

// startTimeout is the start bound for accel.
func (b *Backend) startTimeout(accel string) time.Duration {
	switch {
	case b.opts.StartTimeout > 0:
		return b.opts.StartTimeout
	case accel == "kvm":
		return DefaultStartTimeoutKVM
	default:
		return DefaultStartTimeoutTCG
	}
}
