//go:build linux

package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/agentsandbox/agentsandbox/fsx/atomicfile"
	"github.com/agentsandbox/agentsandbox/guest"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// drainTimeout bounds how long the agent keeps reading the job's output after
// the job's process group is gone: a process that left the group (setsid) may
// still hold the pipes open.
const drainTimeout = 2 * time.Second

// RunJob runs the job described by controlDir/job.json and writes
// controlDir/result.json. The job's stdout and stderr go to console (whole
// lines, without prefixes) and to stdout.log and stderr.log in controlDir.
//
// Every failure to read, validate or start the job ends up in the Result
// (Error set, ExitCode -1), which is written like any other; the returned
// error is non-nil only when result.json could not be written, so a caller
// that gets nil knows the host will find a result.
//
// RunJob keeps no global state and never exits the process. When the calling
// process is PID 1 (a VM's init or a jail's init) it also reaps every other
// child that gets reparented to it, and assumes it owns all of the process's
// children while it runs. Otherwise it waits for the job's pid only.
func RunJob(ctx context.Context, controlDir string, console io.Writer) (guest.Result, error) {
	return RunJobWith(ctx, controlDir, console, RunOptions{})
}

// RunOptions tune RunJobWith.
type RunOptions struct {
	// NoSync skips the fsyncs of the logs and result.json. It is for a
	// namespace jail, which shares the host's kernel and page cache: the
	// host reads the files through the same cache, and the record store
	// makes its own durable copy. A VM guest must sync, or its writes may
	// never reach the host before it powers off.
	NoSync bool
}

// RunJobWith is RunJob with options.
func RunJobWith(ctx context.Context, controlDir string, console io.Writer, o RunOptions) (guest.Result, error) {
	if console == nil {
		console = io.Discard
	}
	res := runJob(ctx, controlDir, console, !o.NoSync)
	if err := writeResult(controlDir, res, !o.NoSync); err != nil {
		return res, err
	}
	return res, nil
}

// ReadJob reads and validates the job file in controlDir.
func ReadJob(controlDir string) (guest.Job, error) {
	var job guest.Job
	path := filepath.Join(controlDir, guest.JobFile)
	b, err := os.ReadFile(path)
	if err != nil {
		return job, fmt.Errorf("read job: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&job); err != nil {
		return job, fmt.Errorf("decode job %s: %w", path, err)
	}
	if err := job.Validate(); err != nil {
		return job, fmt.Errorf("invalid job %s: %w", path, err)
	}
	return job, nil
}

// runJob does everything but writing the result.
func runJob(ctx context.Context, controlDir string, console io.Writer, syncFiles bool) guest.Result {
	res := guest.Result{Version: guest.ProtocolVersion, ExitCode: -1}
	fail := func(err error) guest.Result {
		now := time.Now().UTC()
		if res.Started.IsZero() {
			res.Started = now
		}
		res.Finished = now
		res.ExitCode = -1
		res.Error = err.Error()
		return res
	}
	job, err := ReadJob(controlDir)
	res.Step = job.Step
	if err != nil {
		return fail(err)
	}
	if job.Session {
		return fail(errors.New("job.json asks for a session, which runs commands on a socket (RunSession), not as one job: start it with the namespace backend's Open"))
	}
	argv0, err := lookPath(job.Command[0], job.Env)
	if err != nil {
		return fail(err)
	}
	attr, err := sysProcAttr(job)
	if err != nil {
		return fail(err)
	}

	outLog, err := createLog(filepath.Join(controlDir, guest.StdoutFile))
	if err != nil {
		return fail(err)
	}
	defer outLog.Close()
	errLog, err := createLog(filepath.Join(controlDir, guest.StderrFile))
	if err != nil {
		return fail(err)
	}
	defer errLog.Close()

	devNull, err := os.Open(os.DevNull)
	if err != nil {
		return fail(fmt.Errorf("open %s for the job's stdin: %w", os.DevNull, err))
	}
	defer devNull.Close()
	outR, outW, err := os.Pipe()
	if err != nil {
		return fail(fmt.Errorf("create stdout pipe: %w", err))
	}
	defer outR.Close()
	errR, errW, err := os.Pipe()
	if err != nil {
		outW.Close()
		return fail(fmt.Errorf("create stderr pipe: %w", err))
	}
	defer errR.Close()

	res.Started = time.Now().UTC()
	pid, err := syscall.ForkExec(argv0, job.Command, &syscall.ProcAttr{
		Dir:   job.Workdir,
		Env:   append([]string{}, job.Env...),
		Files: []uintptr{devNull.Fd(), outW.Fd(), errW.Fd()},
		Sys:   attr,
	})
	outW.Close()
	errW.Close()
	if err != nil {
		return fail(fmt.Errorf("start %s in %s as %d:%d: %w", argv0, job.Workdir, job.UID, job.GID, err))
	}

	var consoleMu sync.Mutex
	var copiers sync.WaitGroup
	var copyErrs [2]error
	copiers.Add(2)
	go func() {
		defer copiers.Done()
		copyErrs[0] = tee(outR, outLog, console, &consoleMu)
	}()
	go func() {
		defer copiers.Done()
		copyErrs[1] = tee(errR, errLog, console, &consoleMu)
	}()

	// Wait for the job in its own goroutine; signal its group from here.
	type exit struct {
		ws  syscall.WaitStatus
		ru  syscall.Rusage
		err error
	}
	done := make(chan exit, 1)
	reaper := os.Getpid() == 1
	go func() {
		var e exit
		e.ws, e.ru, e.err = waitJob(pid, reaper)
		done <- e
	}()

	var timeout <-chan time.Time
	if job.TimeoutMS > 0 {
		t := time.NewTimer(time.Duration(job.TimeoutMS) * time.Millisecond)
		defer t.Stop()
		timeout = t.C
	}
	var kill <-chan time.Time
	var cancelled error
	var e exit
wait:
	for {
		select {
		case e = <-done:
			break wait
		case <-timeout:
			timeout = nil
			res.TimedOut = true
			kill = terminate(pid)
		case <-ctx.Done():
			cancelled = ctx.Err()
			ctx = context.Background() // stop selecting on it
			if kill == nil {
				kill = terminate(pid)
			}
		case <-kill:
			kill = nil
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		}
	}
	res.Finished = time.Now().UTC()
	// Whatever the job left in its process group goes with it.
	_ = syscall.Kill(-pid, syscall.SIGKILL)

	drained := make(chan struct{})
	go func() { copiers.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(drainTimeout):
		// A process outside the group holds the pipes: stop reading.
		outR.Close()
		errR.Close()
		<-drained
	}
	if reaper {
		reapZombies()
	}

	if e.err != nil {
		return fail(fmt.Errorf("wait for job pid %d: %w", pid, e.err))
	}
	res.Rusage = guest.Rusage{
		UserMS:    e.ru.Utime.Sec*1000 + int64(e.ru.Utime.Usec)/1000,
		SystemMS:  e.ru.Stime.Sec*1000 + int64(e.ru.Stime.Usec)/1000,
		MaxRSSKiB: e.ru.Maxrss, // Linux reports ru_maxrss in KiB
	}
	switch {
	case e.ws.Exited():
		res.ExitCode = e.ws.ExitStatus()
	case e.ws.Signaled():
		res.ExitCode = -1
		res.Signal = SignalName(e.ws.Signal())
	}
	var errs []string
	if cancelled != nil {
		errs = append(errs, "agent stopped the job: "+cancelled.Error())
	}
	for i, name := range []string{guest.StdoutFile, guest.StderrFile} {
		if copyErrs[i] != nil {
			errs = append(errs, fmt.Sprintf("write %s: %v", name, copyErrs[i]))
		}
	}
	for _, f := range []*os.File{outLog, errLog} {
		if !syncFiles {
			break
		}
		if err := f.Sync(); err != nil {
			errs = append(errs, fmt.Sprintf("sync %s: %v", f.Name(), err))
		}
	}
	res.Error = strings.Join(errs, "; ")
	return res
}

// terminate sends SIGTERM to the job's process group and returns the channel
// that says when to escalate to SIGKILL.
func terminate(pid int) <-chan time.Time {
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	return time.After(guest.KillGrace)
}

// waitJob waits for the job's pid. As PID 1 it waits for any child, so that
// orphans reparented to it are reaped too, until the job itself exits; it
// never reaps the job's status in any other way.
func waitJob(pid int, reaper bool) (syscall.WaitStatus, syscall.Rusage, error) {
	var ws syscall.WaitStatus
	var ru syscall.Rusage
	target := pid
	if reaper {
		target = -1
	}
	for {
		got, err := syscall.Wait4(target, &ws, 0, &ru)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return ws, ru, err
		}
		if got == pid {
			return ws, ru, nil
		}
	}
}

// reapZombies collects every child that has already exited (PID 1 only).
func reapZombies() {
	for {
		var ws syscall.WaitStatus
		got, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil || got <= 0 {
			return
		}
	}
}

// sysProcAttr puts the job in its own process group and, when the agent can
// change identity (it is root), runs it as the job's uid and gid with no
// supplementary groups. An agent that is not root can only run the job as
// itself, so the job must ask for exactly that.
func sysProcAttr(job guest.Job) (*syscall.SysProcAttr, error) {
	attr := &syscall.SysProcAttr{Setpgid: true}
	if os.Geteuid() == 0 {
		attr.Credential = &syscall.Credential{
			Uid:    uint32(job.UID),
			Gid:    uint32(job.GID),
			Groups: []uint32{}, // setgroups(0): drop supplementary groups
		}
		return attr, nil
	}
	if job.UID != os.Geteuid() || job.GID != os.Getegid() {
		return nil, fmt.Errorf("run job as %d:%d: the agent runs as %d:%d and is not root, so it can only run jobs as itself",
			job.UID, job.GID, os.Geteuid(), os.Getegid())
	}
	return attr, nil
}

// lookPath resolves the command the way execvp would, but with the PATH of
// the job's own environment rather than the agent's.
func lookPath(name string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	path := ""
	found := false
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path, found = v, true
		}
	}
	if !found {
		return "", fmt.Errorf("find command %q: it has no slash and the job's env has no PATH", name)
	}
	for _, dir := range filepath.SplitList(path) {
		if !filepath.IsAbs(dir) {
			continue // relative PATH entries would depend on the workdir
		}
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("find command %q in the job's PATH %q: not found", name, path)
}

func createLog(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("create log: %w", err)
	}
	return f, nil
}

// tee copies r to the log file as it comes and to the console in whole
// lines, so that the job's stdout and stderr do not interleave mid-line. A
// console that fails is dropped; a log that fails is an error.
func tee(r io.Reader, log io.Writer, console io.Writer, mu *sync.Mutex) error {
	var logErr error
	consoleOK := true
	var pending []byte
	toConsole := func(b []byte) {
		if !consoleOK || len(b) == 0 {
			return
		}
		mu.Lock()
		_, err := console.Write(b)
		mu.Unlock()
		if err != nil {
			consoleOK = false
		}
	}
	buf := make([]byte, 32*1024)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			chunk := buf[:n]
			if logErr == nil {
				_, logErr = log.Write(chunk)
			}
			pending = append(pending, chunk...)
			if i := bytes.LastIndexByte(pending, '\n'); i >= 0 {
				toConsole(pending[:i+1])
				pending = append(pending[:0], pending[i+1:]...)
			} else if len(pending) >= 64*1024 {
				toConsole(pending) // a very long line: do not hold it back
				pending = pending[:0]
			}
		}
		if err != nil {
			toConsole(pending)
			if err == io.EOF || errors.Is(err, os.ErrClosed) {
				return logErr
			}
			if logErr == nil {
				logErr = fmt.Errorf("read job output: %w", err)
			}
			return logErr
		}
	}
}

// writeResult writes result.json atomically: a temp file in controlDir,
// fsync, rename, fsync of the directory.
func writeResult(controlDir string, res guest.Result, syncFiles bool) error {
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return fmt.Errorf("encode result: %w", err)
	}
	b = append(b, '\n')
	// Atomic either way: the host never sees half a result.
	return atomicfile.Write(filepath.Join(controlDir, guest.ResultFile), b, 0o644, atomicfile.Options{NoSync: !syncFiles})
}
