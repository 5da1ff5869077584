package microvm

import (
	"errors"
	"fmt"
	"slices"

	"github.com/agentsandbox/agentsandbox/guest"
	"github.com/agentsandbox/agentsandbox/workflow"
)

// Names of things in the VM's working directory. microvm-run resolves every
// relative path against its current directory, so the VM runner starts it in
// a directory of its own holding these entries.
const (
	// ControlSocket is microvm.socket, the hypervisor's control socket;
	// with it the runner has bin/microvm-shutdown.
	ControlSocket = "vm.sock"
	// SessionSocket is the host end of a qemu VM's session channel: the
	// unix socket of the chardev behind the virtio-serial port
	// guest.SessionPort (SessionQemuArgs), which qemu listens on.
	SessionSocket = "session.sock"
	// ControlSource and WorkspaceSource are the share sources (qemu 9p,
	// cloud-hypervisor virtiofs): the control directory and the workspace,
	// as entries (directories, binds or symlinks) of the working directory.
	ControlSource   = "control"
	WorkspaceSource = "workspace"
	// ControlImage and WorkspaceImage are firecracker's volume images (it
	// has no shares): ext4 images the runner prepares from the control
	// directory and the workspace before boot and reads back afterwards.
	ControlImage   = "control.img"
	WorkspaceImage = "workspace.img"
	// ControlImageMiB is the size of the control volume.
	ControlImageMiB = 64
	// MinWorkspaceImageMiB is the smallest workspace volume.
	MinWorkspaceImageMiB = 256
)

// SessionQemuArgs are the qemu arguments of a VM's session channel
// (agentsandbox serve): a chardev listening on SessionSocket (relative:
// in the VM's working directory), a virtio-serial controller of devType
// ("pci" for microvm.nix's runners with shares, "device" for virtio-mmio)
// and on it the port guest.SessionPort, which the agent serves.
func SessionQemuArgs(devType string) []string {
	return []string{
		"-chardev", "socket,id=asbsession,path=" + SessionSocket + ",server=on,wait=off",
		"-device", "virtio-serial-" + devType + ",id=asbserial",
		"-device", "virtserialport,bus=asbserial.0,chardev=asbsession,name=" + guest.SessionPort,
	}
}

// TapID is the host-side name of the tap interface of every environment
// with egress. Each step runs in a network namespace of its own, so one name
// serves all of them and the image does not depend on the step.
const TapID = "asb-tap0"

// GuestMAC is the guest's MAC address on the tap: locally administered,
// unicast, the rest the guest's address (198.18.0.2, nixgen.GuestAddress).
// Like the addresses, it is the same in every step's own network namespace.
const GuestMAC = "02:00:c6:12:00:02"

// Hypervisors are the hypervisors the vm backend runs. The workflow
// schema accepts every hypervisor nixgen can generate a runner for
// (workflow.HypervisorCloudHypervisor and workflow.HypervisorFirecracker
// too); a step asking for another one is refused before anything is built
// (CheckHypervisor).
var Hypervisors = []workflow.Hypervisor{workflow.HypervisorQEMU}

// ErrHypervisor is CheckHypervisor's answer for a hypervisor the vm
// backend does not run.
var ErrHypervisor = errors.New("hypervisor not supported by the vm backend")

// CheckHypervisor refuses a hypervisor the vm backend does not run (the
// empty one is workflow.DefaultHypervisor), naming the ones it does.
func CheckHypervisor(hv workflow.Hypervisor) error {
	if hv == "" || slices.Contains(Hypervisors, hv) {
		return nil
	}
	return fmt.Errorf("hypervisor %q: %w, which runs %s only so far (the workflow schema accepts it for runners this version cannot start): set hypervisor: %s, or remove the key",
		hv, ErrHypervisor, list(Hypervisors), workflow.HypervisorQEMU)
}

func list(hvs []workflow.Hypervisor) string {
	s := ""
	for i, h := range hvs {
		if i > 0 {
			s += ", "
		}
		s += string(h)
	}
	return s
}
