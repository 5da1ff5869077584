//go:build linux

package atomicfile

const sysSyncfs = 306
