//go:build linux

package agent

import (
	"strconv"
	"strings"
	"syscall"
)

var signalNames = map[syscall.Signal]string{
	syscall.SIGABRT: "SIGABRT", syscall.SIGALRM: "SIGALRM", syscall.SIGBUS: "SIGBUS",
	syscall.SIGCHLD: "SIGCHLD", syscall.SIGCONT: "SIGCONT", syscall.SIGFPE: "SIGFPE",
	syscall.SIGHUP: "SIGHUP", syscall.SIGILL: "SIGILL", syscall.SIGINT: "SIGINT",
	syscall.SIGIO: "SIGIO", syscall.SIGKILL: "SIGKILL", syscall.SIGPIPE: "SIGPIPE",
	syscall.SIGPROF: "SIGPROF", syscall.SIGPWR: "SIGPWR", syscall.SIGQUIT: "SIGQUIT",
	syscall.SIGSEGV: "SIGSEGV", syscall.SIGSTKFLT: "SIGSTKFLT", syscall.SIGSTOP: "SIGSTOP",
	syscall.SIGSYS: "SIGSYS", syscall.SIGTERM: "SIGTERM", syscall.SIGTRAP: "SIGTRAP",
	syscall.SIGTSTP: "SIGTSTP", syscall.SIGTTIN: "SIGTTIN", syscall.SIGTTOU: "SIGTTOU",
	syscall.SIGURG: "SIGURG", syscall.SIGUSR1: "SIGUSR1", syscall.SIGUSR2: "SIGUSR2",
	syscall.SIGVTALRM: "SIGVTALRM", syscall.SIGWINCH: "SIGWINCH", syscall.SIGXCPU: "SIGXCPU",
	syscall.SIGXFSZ: "SIGXFSZ",
}

// SignalName is the conventional name of a signal, such as "SIGKILL";
// real-time signals are "SIGRTMIN+n" and anything else "SIG<number>".
func SignalName(s syscall.Signal) string {
	if n, ok := signalNames[s]; ok {
		return n
	}
	if s >= 34 && s <= 64 {
		return "SIGRTMIN+" + strconv.Itoa(int(s)-34)
	}
	return "SIG" + strconv.Itoa(int(s))
}

// SignalNumber is the signal SignalName calls name; ok is false for a name
// it does not know.
func SignalNumber(name string) (s syscall.Signal, ok bool) {
	for n, nm := range signalNames {
		if nm == name {
			return n, true
		}
	}
	if rest, found := strings.CutPrefix(name, "SIGRTMIN+"); found {
		if i, err := strconv.Atoi(rest); err == nil && i >= 0 && i <= 30 {
			return syscall.Signal(34 + i), true
		}
	}
	return 0, false
}
