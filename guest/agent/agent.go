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

	// As PID 1 every orphan reparented to the agent is reaped too.
	reap := newReaper(os.Getpid() == 1)
	defer reap.run()()
	var consoleMu sync.Mutex
	p, err := startProc(reap, job, procIO{
		Stdout: func(r io.Reader) error { return tee(r, outLog, console, &consoleMu) },
		Stderr: func(r io.Reader) error { return tee(r, errLog, console, &consoleMu) },
	})
	if err != nil {
		return fail(err)
	}
	end := p.wait(ctx, nil)
	res.Started, res.Finished = end.Started, end.Finished
	if end.WaitErr != nil {
		return fail(fmt.Errorf("wait for job pid %d: %w", p.pid, end.WaitErr))
	}
	res.ExitCode, res.Signal, res.TimedOut, res.Rusage = end.ExitCode, end.Signal, end.TimedOut, end.Rusage
	var errs []string
	if end.Stopped != nil {
		errs = append(errs, "agent stopped the job: "+end.Stopped.Error())
	}
	for i, name := range []string{guest.StdoutFile, guest.StderrFile} {
		if end.OutputErr[i] != nil {
			errs = append(errs, fmt.Sprintf("write %s: %v", name, end.OutputErr[i]))
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
