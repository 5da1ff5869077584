package jail

import (
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// libDirs are where the dynamic loader looks without /etc/ld.so.cache
// (glibc's default system directories on Debian's multiarch layout and
// elsewhere), in its order.
var libDirs = []string{
	"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu",
	"/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
	"/lib64", "/usr/lib64", "/lib", "/usr/lib",
}

// runtimeFiles lists what a dynamically linked exe needs to start: its ELF
// interpreter and the libraries it names, at the paths the loader will open
// them by. A static exe (the released agentsandbox) needs nothing. The jail
// binds these into a closure root so that its init can re-execute itself
// there; test binaries built with cgo are dynamic.
func runtimeFiles(exe string) ([]string, error) {
	f, err := elf.Open(exe)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", exe, err)
	}
	defer f.Close()
	var interp string
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			if _, err := p.ReadAt(b, 0); err != nil {
				return nil, fmt.Errorf("read %s interpreter: %w", exe, err)
			}
			interp = strings.TrimRight(string(b), "\x00")
		}
	}
	if interp == "" {
		return nil, nil
	}
	files := []string{interp}
	libs, err := f.ImportedLibraries()
	if err != nil {
		return nil, fmt.Errorf("read %s libraries: %w", exe, err)
	}
	dirs := append([]string{filepath.Dir(interp)}, libDirs...)
	for _, lib := range libs {
		found := ""
		for _, d := range dirs {
			p := filepath.Join(d, lib)
			if _, err := os.Stat(p); err == nil {
				found = p
				break
			}
		}
		if found == "" {
			return nil, fmt.Errorf("find library %s of %s in %v", lib, exe, dirs)
		}
		files = append(files, found)
	}
	return files, nil
}
