package seccomp

import (
	"fmt"

	bpf "github.com/elastic/go-seccomp-bpf"
)

// Install loads p into the calling process: every thread (TSYNC), with
// no_new_privs set. It cannot be undone; every child inherits it.
func (p *Profile) Install() error {
	f, err := p.Filter()
	if err != nil {
		return err
	}
	if err := bpf.LoadFilter(f); err != nil {
		return fmt.Errorf("install seccomp filter: %w", err)
	}
	return nil
}
