package vmfixture

import (
	"bytes"
	"debug/elf"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// DefaultModules are the modules the guest needs for its 9p shares over
// virtio-mmio, a virtio-net interface and the session's virtio-serial
// port (virtio_console). LoadOrder adds their dependencies and puts each
// after the modules it depends on.
var DefaultModules = []string{"virtio_mmio", "9pnet_virtio", "9p", "virtio_net", "virtio_console"}

// Module is one kernel module ready for the initramfs.
type Module struct {
	Name    string   // normalised: dashes become underscores
	Path    string   // the .ko (or .ko.xz/.ko.zst) under the kernel's modules dir
	Depends []string // from the module's .modinfo depends=
}

// moduleIndex maps normalised module names to files under modulesDir.
func moduleIndex(modulesDir string) (map[string]string, error) {
	idx := map[string]string{}
	err := filepath.WalkDir(modulesDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		base := d.Name()
		for _, ext := range []string{".ko", ".ko.xz", ".ko.zst", ".ko.gz"} {
			if strings.HasSuffix(base, ext) {
				idx[normalise(strings.TrimSuffix(base, ext))] = p
				break
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("index kernel modules in %s: %w", modulesDir, err)
	}
	return idx, nil
}

func normalise(name string) string { return strings.ReplaceAll(name, "-", "_") }

// LoadOrder returns the named modules and everything they depend on, each
// after its dependencies, read from the modules under modulesDir. A name
// listed in modules.builtin (compiled into the kernel) is skipped.
func LoadOrder(modulesDir string, names []string) ([]Module, error) {
	idx, err := moduleIndex(modulesDir)
	if err != nil {
		return nil, err
	}
	builtin := map[string]bool{}
	if b, err := os.ReadFile(filepath.Join(modulesDir, "modules.builtin")); err == nil {
		for _, l := range strings.Fields(string(b)) {
			base := filepath.Base(l)
			builtin[normalise(strings.TrimSuffix(base, ".ko"))] = true
		}
	}
	var order []Module
	state := map[string]int{} // 1 visiting, 2 done
	var visit func(name string, chain []string) error
	visit = func(name string, chain []string) error {
		name = normalise(name)
		switch state[name] {
		case 1:
			return fmt.Errorf("kernel module dependency cycle: %s", strings.Join(append(chain, name), " -> "))
		case 2:
			return nil
		}
		p, ok := idx[name]
		if !ok {
			if builtin[name] {
				state[name] = 2
				return nil
			}
			return fmt.Errorf("kernel module %q not found under %s (needed by %s)", name, modulesDir, strings.Join(append(chain, name), " -> "))
		}
		state[name] = 1
		data, err := moduleBytes(p)
		if err != nil {
			return err
		}
		deps, err := modinfoDepends(data)
		if err != nil {
			return fmt.Errorf("read depends of %s: %w", p, err)
		}
		for _, d := range deps {
			if err := visit(d, append(chain, name)); err != nil {
				return err
			}
		}
		state[name] = 2
		order = append(order, Module{Name: name, Path: p, Depends: deps})
		return nil
	}
	for _, n := range names {
		if err := visit(n, nil); err != nil {
			return nil, err
		}
	}
	return order, nil
}

// moduleBytes returns a module's uncompressed ELF bytes. Compressed modules
// are decompressed with xz or zstd, because finit_module in the guest only
// takes compressed modules when the kernel was built to.
func moduleBytes(p string) ([]byte, error) {
	var argv []string
	switch {
	case strings.HasSuffix(p, ".ko"):
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("read kernel module: %w", err)
		}
		return b, nil
	case strings.HasSuffix(p, ".xz"):
		argv = []string{"xz", "-dc", p}
	case strings.HasSuffix(p, ".zst"):
		argv = []string{"zstd", "-dc", p}
	case strings.HasSuffix(p, ".gz"):
		argv = []string{"gzip", "-dc", p}
	default:
		return nil, fmt.Errorf("kernel module %s: unknown compression", p)
	}
	var out, stderr bytes.Buffer
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("decompress kernel module: %s: %w: %s", strings.Join(argv, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out.Bytes(), nil
}

// modinfoDepends reads depends= from the module's .modinfo section.
func modinfoDepends(ko []byte) ([]string, error) {
	f, err := elf.NewFile(bytes.NewReader(ko))
	if err != nil {
		return nil, err
	}
	sec := f.Section(".modinfo")
	if sec == nil {
		return nil, fmt.Errorf("no .modinfo section")
	}
	data, err := sec.Data()
	if err != nil {
		return nil, err
	}
	for _, kv := range bytes.Split(data, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, []byte("depends=")); ok {
			if len(v) == 0 {
				return nil, nil
			}
			return strings.Split(string(v), ","), nil
		}
	}
	return nil, nil
}
