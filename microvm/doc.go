// Package microvm is the contract between the microVM runner nixgen
// generates (a microvm.nix runner) and the vm backend that starts it
// (vmrunner/vm): the entries of the VM's working directory (sockets, share
// sources, volume images), the session channel's qemu arguments, the
// host-side tap and the guest's MAC on it, and the hypervisors the backend
// runs. nixgen writes these names into the runner, the backend looks for
// them on the host; this package is their one owner, so the two cannot
// drift apart.
//
// The package is pure: it knows the protocol (package guest) and the
// workflow's types, and nothing of the host.
package microvm
