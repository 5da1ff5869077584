package jail

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/agentsandbox/agentsandbox/vmrunner/jail/jailwire"
	"github.com/agentsandbox/agentsandbox/vmrunner/seccomp"
	"golang.org/x/sys/unix"
)

// helloTimeout bounds the wait for the init's hello: a binary that is not
// an agent of this protocol may never say anything.
const helloTimeout = 10 * time.Second

// encodedConfig is the jailwire.ChildConfig as JSON, or why it could not be made.
type encodedConfig struct {
	b   []byte
	err error
}

// Process is a started jail.
type Process struct {
	cmd     *exec.Cmd
	init    string             // the init binary's path
	config  chan encodedConfig // from Start's encoder, read by Release
	cfgW    *os.File
	status  chan jailwire.Message // messages from the init, closed at EOF
	done    chan struct{}
	waitErr error

	mu       sync.Mutex
	released bool
	msgs     []string // errors the init reported after it was ready
}

// Start starts the jail's init and holds it: it runs nothing until Release.
// Place it in its cgroup (Pid) in between. The root is planned here, so a
// bad configuration fails before any process exists; a seccomp profile
// that does not compile fails Release.
func Start(cfg Config) (*Process, error) {
	if cfg.NetnsPath == "" {
		return nil, errors.New("start jail: no network namespace given; a jail never shares the host's network")
	}
	if cfg.RootDir == "" {
		return nil, errors.New("start jail: no root directory given")
	}
	initPath := cfg.InitPath
	if initPath == "" {
		p, err := AgentPath()
		if err != nil {
			return nil, fmt.Errorf("start jail: %w", err)
		}
		initPath = p
	} else if !filepath.IsAbs(initPath) {
		return nil, fmt.Errorf("start jail: init binary %q is not an absolute path", initPath)
	}
	if len(cfg.ClosurePaths) > 0 && cfg.Exec == nil {
		files, err := runtimeFiles(initPath)
		if err != nil {
			return nil, fmt.Errorf("start jail: %w", err)
		}
		cfg.initFiles = files
	}
	plan, err := Plan(cfg, OSFS)
	if err != nil {
		return nil, fmt.Errorf("start jail: %w", err)
	}
	cc := jailwire.ChildConfig{RootDir: cfg.RootDir, Hostname: cfg.Hostname, Plan: plan, Exec: cfg.Exec, Rlimits: cfg.Rlimits.WithDefaults()}
	// The seccomp filter is compiled (once per profile in this process:
	// 1-2 ms) and the config encoded while the init execs and its Go
	// runtime starts, which it does before it can read them anyway.
	config := make(chan encodedConfig, 1)
	go func() {
		var e encodedConfig
		if !cfg.NoSeccomp {
			if cc.Seccomp, e.err = program(cfg.Seccomp); e.err != nil {
				config <- e
				return
			}
		}
		if e.b, e.err = json.Marshal(cc); e.err != nil {
			e.err = fmt.Errorf("encode config: %w", e.err)
		}
		config <- e
	}()
	netnsFile, err := os.Open(cfg.NetnsPath)
	if err != nil {
		return nil, fmt.Errorf("start jail: open network namespace: %w", err)
	}
	defer netnsFile.Close()
	cfgR, cfgW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("start jail: config pipe: %w", err)
	}
	defer cfgR.Close()
	statR, statW, err := os.Pipe()
	if err != nil {
		cfgW.Close()
		return nil, fmt.Errorf("start jail: status pipe: %w", err)
	}
	defer statW.Close()

	// Descriptors this process inherited without close-on-exec would
	// otherwise reach the init, and through it the job.
	if err := closeInheritedOnExec(); err != nil {
		cfgW.Close()
		statR.Close()
		return nil, fmt.Errorf("start jail: %w", err)
	}
	cmd := exec.Command(initPath, jailwire.InitArg)
	cmd.Args[0] = "agentsandbox-init"
	cmd.ExtraFiles = []*os.File{cfgR, statW, netnsFile} // fds 3, 4, 5
	cmd.Env = []string{
		jailwire.EnvStage + "=1",
		// One P: the init runs one job or program and needs no
		// parallelism, and with fewer Ps the Go runtime has fewer
		// threads, each of which every AllThreadsSyscall of stage 1
		// (about 45 of them: setns, the keyring, one per capability
		// dropped from the bounding set, capset, no_new_privs) stops
		// and signals. 5 threads became 4 and the privilege drop went
		// from 5.7-7.1 ms to 2.4-3.1 ms (medians of 15 applies).
		"GOMAXPROCS=1",
		jailwire.EnvConfigFD + "=3",
		jailwire.EnvStatusFD + "=4",
		jailwire.EnvNetnsFD + "=5",
	}
	console := cfg.Console
	if console == nil {
		console = io.Discard
	}
	cmd.Stdout = console
	cmd.Stderr = console
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS,
		Pdeathsig:  syscall.SIGKILL,
		// A session of its own, and so a process group of its own and no
		// controlling terminal: a Ctrl-C on the terminal reaches
		// agentsandbox, which cancels and cleans up in order, and not the
		// jail directly, and nothing in the jail can reach the caller's
		// terminal (TIOCSTI needs it to be the controlling one).
		Setsid: true,
	}
	if cfg.CgroupFD > 0 {
		cmd.SysProcAttr.UseCgroupFD = true
		cmd.SysProcAttr.CgroupFD = cfg.CgroupFD
	}
	if err := cmd.Start(); err != nil {
		cfgW.Close()
		statR.Close()
		return nil, fmt.Errorf("start jail init %s: %w", initPath, err)
	}
	p := &Process{
		cmd:    cmd,
		init:   initPath,
		config: config,
		cfgW:   cfgW,
		status: make(chan jailwire.Message, 4),
		done:   make(chan struct{}),
	}
	go p.readStatus(statR)
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *Process) readStatus(r *os.File) {
	defer r.Close()
	defer close(p.status)
	dec := json.NewDecoder(r)
	for {
		var m jailwire.Message
		if err := dec.Decode(&m); err != nil {
			return
		}
		p.status <- m
	}
}

// Pid is the init's pid on the host.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Release sends the configuration (the child's "go") and waits until the
// jail is built and its init is about to run the job. A setup failure comes
// back as an error such as "jail setup: mount proc on /proc: permission
// denied"; the init has then exited or is exiting.
func (p *Process) Release() error {
	p.mu.Lock()
	if p.released {
		p.mu.Unlock()
		return errors.New("release jail: already released")
	}
	p.released = true
	p.mu.Unlock()
	if err := p.handshake(); err != nil {
		p.cfgW.Close()
		_ = p.Kill()
		<-p.done
		return err
	}
	config := <-p.config
	if config.err != nil {
		p.cfgW.Close()
		_ = p.Kill()
		<-p.done
		return fmt.Errorf("start jail: %w", config.err)
	}
	_, werr := p.cfgW.Write(config.b)
	p.cfgW.Close()
	m, ok := <-p.status
	switch {
	case ok && m.Ready:
		go p.collect()
		return nil
	case ok && m.Error != "":
		<-p.done
		return errors.New(m.Error)
	}
	<-p.done
	if werr != nil {
		return fmt.Errorf("jail setup: send config: %w (init: %v)", werr, p.waitErr)
	}
	return fmt.Errorf("jail setup: init exited before it was ready: %v", p.waitErr)
}

// handshake waits for the init's hello and checks it, before the config
// goes out: a binary of another protocol never sees it.
func (p *Process) handshake() error {
	t := time.NewTimer(helloTimeout)
	defer t.Stop()
	select {
	case m, ok := <-p.status:
		switch {
		case ok && m.Hello != nil:
			if err := m.Hello.Check(); err != nil {
				return &AgentError{Path: p.init, Err: err}
			}
			return nil
		case ok && m.Error != "":
			return &AgentError{Path: p.init, Err: fmt.Errorf("it failed before its hello: %s", m.Error)}
		case ok:
			return &AgentError{Path: p.init, Err: errors.New("it did not start with a hello: it is an agent of an older protocol")}
		}
		<-p.done
		if ps := p.cmd.ProcessState; ps != nil && !ps.Exited() {
			// Killed (a cancel, the cgroup's OOM killer): not the binary's fault.
			return fmt.Errorf("jail setup: init %s ended before its hello: %v", p.init, p.waitErr)
		}
		return &AgentError{Path: p.init, Err: fmt.Errorf("it exited without a hello (%v): it is not an agentsandbox-guest that can be a jail's init", p.waitErr)}
	case <-t.C:
		return &AgentError{Path: p.init, Err: fmt.Errorf("no hello within %v: it is not an agentsandbox-guest that can be a jail's init", helloTimeout)}
	}
}

// collect keeps the errors the init reports after it was ready.
func (p *Process) collect() {
	for m := range p.status {
		if m.Error != "" {
			p.mu.Lock()
			p.msgs = append(p.msgs, m.Error)
			p.mu.Unlock()
		}
	}
}

// Done is closed when the init has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Wait waits for the init to exit. It returns nil when the init exited 0,
// which in job mode it does only after result.json was written and in exec
// mode when the program exited 0; otherwise the init's exit status (in exec
// mode the program's, 128+n for signal n) and any error it reported.
func (p *Process) Wait() error {
	<-p.done
	p.mu.Lock()
	released := p.released
	msgs := append([]string(nil), p.msgs...)
	p.mu.Unlock()
	if !released {
		p.cfgW.Close()
	}
	if p.waitErr == nil {
		return nil
	}
	if len(msgs) > 0 {
		return fmt.Errorf("jail init: %v: %s", p.waitErr, msgs[0])
	}
	return fmt.Errorf("jail init: %w", p.waitErr)
}

// Kill sends SIGKILL to the init; the kernel then kills every process of the
// jail's pid namespace. Killing an init that already exited is not an error.
func (p *Process) Kill() error {
	select {
	case <-p.done:
		return nil
	default:
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill jail init %d: %w", p.Pid(), err)
	}
	return nil
}

// Close releases a process that was never released: the held child reads
// EOF instead of a config and exits.
func (p *Process) Close() error {
	p.mu.Lock()
	released := p.released
	p.released = true
	p.mu.Unlock()
	if !released {
		p.cfgW.Close()
	}
	return nil
}

// program is p compiled, or the default profile when p is nil. Programs
// are kept by the profile's digest: most steps run the same filter.
func program(p *seccomp.Profile) (seccomp.Program, error) {
	if p == nil {
		d, err := seccomp.Default()
		if err != nil {
			return nil, err
		}
		p = d
	}
	key := p.Digest()
	programs.Lock()
	defer programs.Unlock()
	if prog, ok := programs.m[key]; ok {
		return prog, nil
	}
	prog, err := p.Program()
	if err != nil {
		return nil, err
	}
	if programs.m == nil || len(programs.m) > 64 {
		programs.m = map[[32]byte]seccomp.Program{}
	}
	programs.m[key] = prog
	return prog, nil
}

var programs struct {
	sync.Mutex
	m map[[32]byte]seccomp.Program
}

// closeInheritedOnExec marks every descriptor from 3 up close-on-exec in
// this process. Go opens all of its own descriptors so; what is left are
// descriptors the process inherited from whoever started it (a shell's
// 9<file, a leaked socket), which os/exec would otherwise pass on to every
// child, since it closes nothing. Descriptors meant for a child go in
// ExtraFiles, which the child gets whatever their flags.
func closeInheritedOnExec() error {
	if err := unix.CloseRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return fmt.Errorf("mark inherited descriptors close-on-exec: %w", err)
	}
	return nil
}
