// Package compiled is a seccomp filter already compiled to classic BPF:
// the instructions, their JSON encoding and Load, which installs them with
// seccomp(2). It imports only the standard library and golang.org/x/sys/unix.
//
// It is apart from vmrunner/seccomp, which compiles profiles, so that the
// jail's init (vmrunner/jail/jailinit, linked into the static agent) can load
// a filter without linking the compiler: github.com/elastic/go-seccomp-bpf,
// github.com/moby/profiles/seccomp and the OCI runtime spec, whose package
// initialisation alone costs the agent a millisecond and 165 KB at every
// step. vmrunner/seccomp's Program is this package's Program.
package compiled

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Program is a profile compiled to classic BPF, the instructions the kernel
// runs on every system call. In JSON it is one base64 string of the
// instructions in the kernel's layout (struct sock_filter, native byte
// order), so the jail's parent compiles a profile once and its init only
// loads it.
type Program []unix.SockFilter

// MarshalJSON encodes the program as base64 of its instructions.
func (p Program) MarshalJSON() ([]byte, error) {
	b := make([]byte, 0, 8*len(p))
	for _, ins := range p {
		b = binary.NativeEndian.AppendUint16(b, ins.Code)
		b = append(b, ins.Jt, ins.Jf)
		b = binary.NativeEndian.AppendUint32(b, ins.K)
	}
	return json.Marshal(base64.StdEncoding.EncodeToString(b))
}

// UnmarshalJSON decodes what MarshalJSON wrote.
func (p *Program) UnmarshalJSON(data []byte) error {
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		return err
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return fmt.Errorf("seccomp program: %w", err)
	}
	if len(b)%8 != 0 {
		return fmt.Errorf("seccomp program: %d bytes is not a whole number of instructions", len(b))
	}
	prog := make(Program, len(b)/8)
	for i := range prog {
		r := b[8*i:]
		prog[i] = unix.SockFilter{Code: binary.NativeEndian.Uint16(r), Jt: r[2], Jf: r[3], K: binary.NativeEndian.Uint32(r[4:])}
	}
	*p = prog
	return nil
}

// Load installs the program in the calling process: it sets no_new_privs
// on the calling thread (seccomp needs it without CAP_SYS_ADMIN, and the
// kernel passes it on to the other threads with the filter) and loads the
// filter with SECCOMP_FILTER_FLAG_TSYNC, so that every thread of the
// process runs it. It cannot be undone; every child inherits it.
func (p Program) Load() error {
	if len(p) == 0 || len(p) > unix.BPF_MAXINSNS {
		return fmt.Errorf("install seccomp filter: %d instructions", len(p))
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("install seccomp filter: set no_new_privs: %w", err)
	}
	fprog := unix.SockFprog{Len: uint16(len(p)), Filter: &p[0]}
	r, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(p)
	if e != 0 {
		return fmt.Errorf("install seccomp filter: %w", e)
	}
	if r != 0 {
		// With TSYNC the kernel returns the id of a thread it could not
		// synchronise (one with a filter of its own).
		return fmt.Errorf("install seccomp filter: thread %d could not take it", r)
	}
	return nil
}
