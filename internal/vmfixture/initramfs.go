package vmfixture

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
)

// ModulesListPath is the file in the initramfs listing the modules the
// guest agent loads, one guest path a line, in load order.
const ModulesListPath = "/etc/agentsandbox/modules"

// InitramfsSpec is what goes into the fixture's initramfs.
type InitramfsSpec struct {
	Init    []byte   // /init: the static agentsandbox-guest, or a script
	Busybox string   // a static busybox; installed as /bin/busybox with its applets
	Modules []Module // loaded in this order by the agent
	// HostBinaries are copied from the host at the same paths, with the
	// shared libraries ldd lists (bash, for tests that need more than
	// busybox's sh).
	HostBinaries []string
}

// BuildInitramfs assembles the archive: /init, busybox and its applet
// links, the modules (decompressed) under /lib/modules with their list in
// ModulesListPath, /dev/console, and the mount points the agent uses.
func BuildInitramfs(spec InitramfsSpec) (*Archive, error) {
	a := NewArchive()
	for _, d := range []string{"proc", "sys", "dev", "run", "workspace", "root", "etc", "usr/bin", "usr/sbin", "sbin", "bin"} {
		a.Dir(d, 0o755)
	}
	a.Dir("tmp", 0o1777)
	a.CharDev("dev/console", 0o600, 5, 1)
	a.CharDev("dev/null", 0o666, 1, 3)
	a.File("etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"))
	a.File("etc/group", 0o644, []byte("root:x:0:\nnogroup:x:65534:\n"))
	if len(spec.Init) == 0 {
		return nil, fmt.Errorf("build initramfs: no /init")
	}
	a.File("init", 0o755, spec.Init)

	if spec.Busybox != "" {
		bb, err := os.ReadFile(spec.Busybox)
		if err != nil {
			return nil, fmt.Errorf("build initramfs: read busybox: %w", err)
		}
		a.File("bin/busybox", 0o755, bb)
		applets, err := busyboxApplets(spec.Busybox)
		if err != nil {
			return nil, fmt.Errorf("build initramfs: %w", err)
		}
		for _, p := range applets {
			if p == "bin/busybox" {
				continue
			}
			a.Symlink(p, "/bin/busybox")
		}
	}

	for _, bin := range spec.HostBinaries {
		if err := addHostBinary(a, bin); err != nil {
			return nil, fmt.Errorf("build initramfs: %w", err)
		}
	}

	var list strings.Builder
	for _, m := range spec.Modules {
		data, err := moduleBytes(m.Path)
		if err != nil {
			return nil, fmt.Errorf("build initramfs: %w", err)
		}
		gp := path.Join("/lib/modules", m.Name+".ko")
		a.File(gp, 0o644, data)
		list.WriteString(gp + "\n")
	}
	a.File(ModulesListPath, 0o644, []byte(list.String()))
	return a, nil
}

// busyboxApplets lists the applets' install paths (such as usr/bin/awk).
func busyboxApplets(busybox string) ([]string, error) {
	var out, stderr bytes.Buffer
	cmd := exec.Command(busybox, "--list-full")
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s --list-full: %w: %s", busybox, err, strings.TrimSpace(stderr.String()))
	}
	return strings.Fields(out.String()), nil
}

// addHostBinary copies bin and the libraries `ldd bin` lists, each at the
// path ldd prints (symlinks resolved for reading).
func addHostBinary(a *Archive, bin string) error {
	files := []string{bin}
	var out, stderr bytes.Buffer
	cmd := exec.Command("ldd", bin)
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("ldd %s: %w: %s", bin, err, strings.TrimSpace(stderr.String()))
	}
	for _, l := range strings.Split(out.String(), "\n") {
		for _, f := range strings.Fields(l) {
			if strings.HasPrefix(f, "/") {
				files = append(files, f)
				break
			}
		}
	}
	for _, f := range files {
		real, err := filepath.EvalSymlinks(f)
		if err != nil {
			return fmt.Errorf("copy host binary: %w", err)
		}
		data, err := os.ReadFile(real)
		if err != nil {
			return fmt.Errorf("copy host binary: %w", err)
		}
		a.File(f, 0o755, data)
	}
	return nil
}
