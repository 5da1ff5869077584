package nixgen

import (
	"reflect"
	"testing"

	"github.com/agentsandbox/agentsandbox/guest"
	"github.com/agentsandbox/agentsandbox/microvm"
	"github.com/agentsandbox/agentsandbox/workflow"
)

// Every qemu environment carries the session channel's devices, as PCI
// devices (its 9p shares make microvm.nix's runner use PCI); the other
// hypervisors have no virtio-serial and get none.
func TestSessionChannelArgs(t *testing.T) {
	want := []string{
		"-chardev", "socket,id=asbsession,path=session.sock,server=on,wait=off",
		"-device", "virtio-serial-pci,id=asbserial",
		"-device", "virtserialport,bus=asbserial.0,chardev=asbsession,name=" + guest.SessionPort,
	}
	if got := microvm.SessionQemuArgs("pci"); !reflect.DeepEqual(got, want) {
		t.Errorf("microvm.SessionQemuArgs(pci) = %q, want %q", got, want)
	}
	seen := map[string]bool{}
	for name, w := range examples(t) {
		for _, s := range w.Steps {
			e, err := EnvironmentOf(&s)
			if err != nil {
				t.Fatal(err)
			}
			sd, _, err := envFor(e.Hash(), e)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, a := range sd.SessionArgs {
				got = append(got, unquote(t, a))
			}
			seen[e.Hypervisor] = true
			if e.Hypervisor == string(workflow.HypervisorQEMU) {
				if !reflect.DeepEqual(got, want) {
					t.Errorf("%s/%s: qemu.extraArgs %q, want %q", name, s.Name, got, want)
				}
			} else if len(got) > 0 {
				t.Errorf("%s/%s: %s environment with the session channel %q", name, s.Name, e.Hypervisor, got)
			}
		}
	}
	if !seen[string(workflow.HypervisorQEMU)] || len(seen) < 2 {
		t.Errorf("the examples cover hypervisors %v: want qemu and another", seen)
	}
}
