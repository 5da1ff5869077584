package vmfixture

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/agentsandbox/agentsandbox/nixbuild"
)

// NixAttr is the flake attribute of the fixture runner, the place where a
// generated flake exports a microvm.nix declaredRunner.
const NixAttr = "packages.x86_64-linux.runner"

// flakeTemplate has no inputs: the kernel, initramfs, scripts and a static
// busybox (the builder, and the #! interpreter of microvm-run) travel in the
// flake's own source. @out@ and @bb@ in the files are replaced at build time.
const flakeTemplate = `# agentsandbox VM test fixture: a microvm.nix-shaped qemu runner built
# without nixpkgs (see vmrunner/vm/vmfixture and docs/vm.md).
{
  description = "agentsandbox vm fixture runner";
  outputs = { self }:
    let
      bb = ./bb;
      files = ./files;
      runner = derivation {
        name = "microvm-qemu-%s";
        system = "x86_64-linux";
        builder = "${bb}/sh";
        PATH = "${bb}";
        args = [ "-c" ''
          set -e
          mkdir -p $out
          cp -r ${files}/. $out/
          chmod -R u+w $out
          sed -e "s|@out@|$out|g" -e "s|@bb@|${bb}|g" ${files}/bin/microvm-run > $out/bin/microvm-run
          chmod 0555 $out/bin/microvm-run
        '' ];
      };
    in {
      packages.x86_64-linux.runner = runner;%s
    };
}
`

// BuildNix builds the fixture runner as a Nix store path: it writes an
// offline flake into flakeDir (which must not exist) and realises it with
// nixbuild.Build, the tool's own realisation code. The same inputs give the
// same store path, so a rebuild is a cache hit.
func BuildNix(ctx context.Context, flakeDir string, opts Options, stderr io.Writer) (*Fixture, error) {
	p, err := BuildParts(ctx, opts)
	if err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(flakeDir)
	if err != nil {
		return nil, err
	}
	r := p.Runner
	r.Kernel = "@out@/kernel"
	r.Initrd = "@out@/initrd"
	files := map[string]string{}
	for n, c := range r.ShareFiles() {
		files[filepath.Join("files", n)] = c
	}
	files["files/bin/microvm-run"] = r.RunScript("@bb@/busybox")
	var aliases strings.Builder
	for _, step := range opts.Steps {
		// The attributes `apply` realises for a vm step (nixgen's RunnerAttr
		// and TCGRunnerAttr), so `apply --flake` can run the fixture.
		fmt.Fprintf(&aliases, "\n      packages.x86_64-linux.%q = runner;", step)
		fmt.Fprintf(&aliases, "\n      legacyPackages.x86_64-linux.tcgRunners.%q = runner;", step)
	}
	files["flake.nix"] = fmt.Sprintf(flakeTemplate, r.Name, aliases.String())
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := writeFile(filepath.Join(abs, n), []byte(files[n]), 0o644); err != nil {
			return nil, fmt.Errorf("write fixture flake: %w", err)
		}
	}
	if err := writeFile(filepath.Join(abs, "files", "initrd"), p.Initrd, 0o644); err != nil {
		return nil, fmt.Errorf("write fixture flake: %w", err)
	}
	if err := copyFile(p.Kernel.Image, filepath.Join(abs, "files", "kernel")); err != nil {
		return nil, fmt.Errorf("write fixture flake: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(abs, "bb"), 0o755); err != nil {
		return nil, fmt.Errorf("write fixture flake: %w", err)
	}
	bb, err := os.ReadFile(p.Opts.Busybox)
	if err != nil {
		return nil, fmt.Errorf("write fixture flake: read busybox: %w", err)
	}
	if err := writeFile(filepath.Join(abs, "bb", "busybox"), bb, 0o755); err != nil {
		return nil, fmt.Errorf("write fixture flake: %w", err)
	}
	// busybox picks its applet from argv[0]; Nix runs the builder by path.
	if err := os.Symlink("busybox", filepath.Join(abs, "bb", "sh")); err != nil {
		return nil, fmt.Errorf("write fixture flake: %w", err)
	}
	outs, err := nixbuild.Build(ctx, abs, []string{NixAttr}, nixbuild.Options{Offline: true, Stderr: stderr})
	if err != nil {
		return nil, fmt.Errorf("build fixture runner with nix: %w", err)
	}
	out := outs[0].Out
	r.Kernel = filepath.Join(out, "kernel")
	r.Initrd = filepath.Join(out, "initrd")
	return &Fixture{Dir: out, Kernel: p.Kernel, Runner: r}, nil
}
