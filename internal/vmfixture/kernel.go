package vmfixture

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// CacheEnv names the directory holding the unpacked Debian kernel. .ci/run
// fills it with FetchKernel's commands; DefaultCacheDir is used when unset.
const CacheEnv = "AGENTSANDBOX_VMFIXTURE_CACHE"

// DefaultCacheDir is where the kernel is unpacked when CacheEnv is unset.
const DefaultCacheDir = "/var/cache/agentsandbox/vmfixture"

// KernelMetaPackage is Debian's generic kernel meta package; its one
// linux-image-<version>-amd64 dependency is the kernel the fixture uses.
const KernelMetaPackage = "linux-image-amd64"

// CacheDir returns $AGENTSANDBOX_VMFIXTURE_CACHE or DefaultCacheDir.
func CacheDir() string {
	if d := os.Getenv(CacheEnv); d != "" {
		return d
	}
	return DefaultCacheDir
}

// Kernel is an unpacked Debian kernel package.
type Kernel struct {
	Version    string // such as 6.1.0-57-amd64
	Image      string // boot/vmlinuz-<version>
	ModulesDir string // lib/modules/<version>
}

// ErrNoKernel means the cache holds no unpacked kernel.
var ErrNoKernel = errors.New("no unpacked kernel")

// FindKernel looks for <cacheDir>/root/boot/vmlinuz-* with its modules and
// returns the newest version found.
func FindKernel(cacheDir string) (Kernel, error) {
	root := filepath.Join(cacheDir, "root")
	images, _ := filepath.Glob(filepath.Join(root, "boot", "vmlinuz-*"))
	sort.Strings(images)
	for i := len(images) - 1; i >= 0; i-- {
		ver := strings.TrimPrefix(filepath.Base(images[i]), "vmlinuz-")
		mods := filepath.Join(root, "lib", "modules", ver)
		if st, err := os.Stat(mods); err == nil && st.IsDir() {
			return Kernel{Version: ver, Image: images[i], ModulesDir: mods}, nil
		}
	}
	return Kernel{}, fmt.Errorf("find kernel in %s: %w (run as root: apt-get download %s's linux-image-*-amd64 dependency and dpkg -x it into %s, or set %s)",
		cacheDir, ErrNoKernel, KernelMetaPackage, root, CacheEnv)
}

// DependsCmd asks apt which versioned kernel the meta package pulls in.
func DependsCmd() []string { return []string{"apt-cache", "depends", KernelMetaPackage} }

// DownloadCmd downloads pkg's .deb into the current directory.
func DownloadCmd(pkg string) []string { return []string{"apt-get", "download", pkg} }

// UnpackCmd unpacks a .deb into dir without installing it.
func UnpackCmd(deb, dir string) []string { return []string{"dpkg", "-x", deb, dir} }

// parseKernelDepends picks linux-image-*-amd64 out of apt-cache depends.
func parseKernelDepends(out string) (string, error) {
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) == 2 && strings.TrimPrefix(f[0], "|") == "Depends:" && strings.HasPrefix(f[1], "linux-image-") {
			return f[1], nil
		}
	}
	return "", fmt.Errorf("no linux-image dependency in apt-cache depends %s output: %q", KernelMetaPackage, out)
}

// FetchKernel downloads Debian's generic kernel with apt-get download and
// unpacks it with dpkg -x into cacheDir (never installing it), then returns
// it. It needs apt's package lists and, normally, root.
func FetchKernel(ctx context.Context, cacheDir string) (Kernel, error) {
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return Kernel{}, fmt.Errorf("fetch kernel: %w", err)
	}
	out, err := runIn(ctx, "", DependsCmd())
	if err != nil {
		return Kernel{}, fmt.Errorf("fetch kernel: %w", err)
	}
	pkg, err := parseKernelDepends(out)
	if err != nil {
		return Kernel{}, fmt.Errorf("fetch kernel: %w", err)
	}
	if _, err := runIn(ctx, cacheDir, DownloadCmd(pkg)); err != nil {
		return Kernel{}, fmt.Errorf("fetch kernel: %w", err)
	}
	debs, _ := filepath.Glob(filepath.Join(cacheDir, pkg+"_*.deb"))
	if len(debs) == 0 {
		return Kernel{}, fmt.Errorf("fetch kernel: apt-get download %s left no .deb in %s", pkg, cacheDir)
	}
	sort.Strings(debs)
	tmp, err := os.MkdirTemp(cacheDir, "unpack-")
	if err != nil {
		return Kernel{}, fmt.Errorf("fetch kernel: %w", err)
	}
	defer os.RemoveAll(tmp)
	if _, err := runIn(ctx, "", UnpackCmd(debs[len(debs)-1], tmp)); err != nil {
		return Kernel{}, fmt.Errorf("fetch kernel: %w", err)
	}
	root := filepath.Join(cacheDir, "root")
	if err := os.Rename(tmp, root); err != nil {
		// Another process may have unpacked it meanwhile: use theirs.
		if _, ferr := FindKernel(cacheDir); ferr != nil {
			return Kernel{}, fmt.Errorf("fetch kernel: %w", err)
		}
	}
	return FindKernel(cacheDir)
}

// FindOrFetchKernel returns the cached kernel, fetching it first when the
// cache is empty and this process is root.
func FindOrFetchKernel(ctx context.Context, cacheDir string) (Kernel, error) {
	k, err := FindKernel(cacheDir)
	if err == nil || os.Geteuid() != 0 {
		return k, err
	}
	if _, lerr := exec.LookPath("apt-get"); lerr != nil {
		return k, err
	}
	return FetchKernel(ctx, cacheDir)
}

func runIn(ctx context.Context, dir string, argv []string) (string, error) {
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, strings.TrimSpace(out.String()))
	}
	return out.String(), nil
}
