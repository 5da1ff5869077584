//go:build linux && (amd64 || arm64 || riscv64 || loong64)

package atomicfile

import (
	"fmt"
	"os"
	"syscall"
)

// syncfs calls syncfs(2) on f's file system. The number comes from a
// per-architecture file because package syscall does not name it, and the
// pure core (record) may not import golang.org/x/sys/unix.
func syncfs(f *os.File) error {
	for {
		_, _, e := syscall.Syscall(sysSyncfs, f.Fd(), 0, 0)
		if e == syscall.EINTR {
			continue
		}
		if e != 0 {
			return fmt.Errorf("syncfs %s: %w", f.Name(), e)
		}
		return nil
	}
}
