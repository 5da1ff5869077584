//go:build !(linux && (amd64 || arm64 || riscv64 || loong64))

package atomicfile

import (
	"os"
	"syscall"
)

// syncfs falls back to sync(2), which flushes every file system: as
// durable, only slower.
func syncfs(*os.File) error {
	syscall.Sync()
	return nil
}
