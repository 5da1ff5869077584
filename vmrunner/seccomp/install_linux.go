package seccomp

import (
	"fmt"

	"github.com/agentsandbox/agentsandbox/vmrunner/seccomp/compiled"
	netbpf "golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Program is a profile compiled to classic BPF (see package
// vmrunner/seccomp/compiled, which holds it and its Load so that the jail's
// init can load a filter without linking this package).
type Program = compiled.Program

// Program compiles p.
func (p *Profile) Program() (Program, error) {
	pol, err := p.Policy()
	if err != nil {
		return nil, err
	}
	insts, err := pol.Assemble()
	if err != nil {
		return nil, fmt.Errorf("seccomp: assemble filter: %w", err)
	}
	raw, err := netbpf.Assemble(insts)
	if err != nil {
		return nil, fmt.Errorf("seccomp: assemble BPF: %w", err)
	}
	prog := make(Program, len(raw))
	for i, r := range raw {
		prog[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	return prog, nil
}

// Install compiles p and loads it (Load).
func (p *Profile) Install() error {
	prog, err := p.Program()
	if err != nil {
		return err
	}
	return prog.Load()
}
