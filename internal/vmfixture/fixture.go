package vmfixture

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"

	"github.com/agentsandbox/agentsandbox/guest"
)

// Share sources of every runner the vm backend starts: relative paths that
// microvm-run's qemu resolves against the VM's working directory, where the
// backend links the step's control directory and workspace.
const (
	ControlSource   = "./control"
	WorkspaceSource = "./workspace"
)

// ShareSecurityModel is the 9p security model of both shares, the one
// nixgen generates: the hypervisor runs unprivileged in its jail, so it
// cannot chown what the guest creates (passthrough would fail every create
// by another uid); files belong to the hypervisor's uid on the host.
const ShareSecurityModel = "none"

// Options configure a fixture runner.
type Options struct {
	CacheDir     string // the unpacked kernel; CacheDir() when empty
	Init         []byte // /init: the static agentsandbox-guest or a test script (required)
	Busybox      string // static busybox; /bin/busybox when empty
	Qemu         string // qemu-system-x86_64 from PATH when empty
	Name         string // the VM's hostName; "asb-fixture" when empty
	MemMiB       int    // 256 when zero
	VCPU         int    // 1 when zero
	Interfaces   []Interface
	KernelParams []string // [TSCParam()] when nil
	Modules      []string // DefaultModules when nil
	HostBinaries []string // host programs (with their libraries) to add, such as /usr/bin/bash
	// Steps are workflow step names BuildNix also exports the runner for,
	// under the attributes apply realises, so `apply --flake DIR` runs it.
	// Step names are DNS labels, which %q quotes safely for Nix.
	Steps []string
}

// Fixture is a built runner and the parts it was made from.
type Fixture struct {
	Dir    string // the runner's root (bin/microvm-run, share/microvm/...)
	Kernel Kernel
	Runner Runner // as written; Kernel and Initrd point into Dir
}

func (o Options) withDefaults() (Options, error) {
	if o.CacheDir == "" {
		o.CacheDir = CacheDir()
	}
	if o.Busybox == "" {
		o.Busybox = "/bin/busybox"
	}
	if o.Qemu == "" {
		p, err := exec.LookPath("qemu-system-x86_64")
		if err != nil {
			return o, fmt.Errorf("find qemu: %w (apt-get install qemu-system-x86)", err)
		}
		o.Qemu = p
	}
	if o.Name == "" {
		o.Name = "asb-fixture"
	}
	if o.MemMiB == 0 {
		o.MemMiB = 256
	}
	if o.VCPU == 0 {
		o.VCPU = 1
	}
	if o.Modules == nil {
		o.Modules = DefaultModules
	}
	if o.KernelParams == nil {
		if p := TSCParam(); p != "" {
			o.KernelParams = []string{p}
		}
	}
	return o, nil
}

// Parts are the kernel and initramfs of a fixture before they are placed.
type Parts struct {
	Kernel Kernel
	Initrd []byte
	Runner Runner // Kernel and Initrd still unset
	Opts   Options
}

// BuildParts finds (or, as root, fetches) the kernel, resolves the module
// load order and assembles the initramfs.
func BuildParts(ctx context.Context, opts Options) (Parts, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return Parts{}, err
	}
	k, err := FindOrFetchKernel(ctx, o.CacheDir)
	if err != nil {
		return Parts{}, err
	}
	mods, err := LoadOrder(k.ModulesDir, o.Modules)
	if err != nil {
		return Parts{}, fmt.Errorf("build fixture: %w", err)
	}
	arch, err := BuildInitramfs(InitramfsSpec{Init: o.Init, Busybox: o.Busybox, Modules: mods, HostBinaries: o.HostBinaries})
	if err != nil {
		return Parts{}, err
	}
	var buf bytes.Buffer
	if _, err := arch.WriteTo(&buf); err != nil {
		return Parts{}, fmt.Errorf("build fixture: write initramfs: %w", err)
	}
	r := Runner{
		Name:         o.Name,
		Qemu:         o.Qemu,
		MemMiB:       o.MemMiB,
		VCPU:         o.VCPU,
		KernelParams: o.KernelParams,
		Interfaces:   o.Interfaces,
		Shares: []Share{
			{Tag: guest.ControlTag, Source: ControlSource, SecurityModel: ShareSecurityModel},
			{Tag: guest.WorkspaceTag, Source: WorkspaceSource, SecurityModel: ShareSecurityModel},
		},
	}
	return Parts{Kernel: k, Initrd: buf.Bytes(), Runner: r, Opts: o}, nil
}

// WriteDir builds the fixture as a plain runner directory at dir (which
// must not exist yet): kernel, initrd, bin/microvm-run and share/microvm.
// BuildNix makes the same runner a Nix store path.
func WriteDir(ctx context.Context, dir string, opts Options) (*Fixture, error) {
	p, err := BuildParts(ctx, opts)
	if err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	r := p.Runner
	r.Kernel = filepath.Join(abs, "kernel")
	r.Initrd = filepath.Join(abs, "initrd")
	files := r.ShareFiles()
	files["bin/microvm-run"] = r.RunScript(p.Opts.Busybox)
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, fmt.Errorf("write fixture: %w", err)
	}
	for _, n := range names {
		mode := os.FileMode(0o644)
		if filepath.Dir(n) == "bin" {
			mode = 0o755
		}
		if err := writeFile(filepath.Join(abs, n), []byte(files[n]), mode); err != nil {
			return nil, fmt.Errorf("write fixture: %w", err)
		}
	}
	if err := writeFile(r.Initrd, p.Initrd, 0o644); err != nil {
		return nil, fmt.Errorf("write fixture: %w", err)
	}
	if err := copyFile(p.Kernel.Image, r.Kernel); err != nil {
		return nil, fmt.Errorf("write fixture: %w", err)
	}
	return &Fixture{Dir: abs, Kernel: p.Kernel, Runner: r}, nil
}

func writeFile(p string, data []byte, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return os.WriteFile(p, data, mode)
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
