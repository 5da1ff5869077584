// Package vmfixture builds the VM test fixture: a runner that honours
// microvm.nix's runner contract (bin/microvm-run, share/microvm/...) without
// nixpkgs. It boots Debian's generic kernel (linux-image-amd64, fetched with
// apt-get download and unpacked with dpkg -x into CacheDir, never installed)
// with an initramfs assembled here from busybox-static, the virtio and 9p
// modules in dependency order, and the static agentsandbox-guest as /init.
//
// WriteDir writes the runner as a plain directory; BuildNix builds the same
// files into a Nix store path from an offline flake (no inputs, a static
// busybox as the builder), so tests exercise Nix → closure → runner.
package vmfixture
