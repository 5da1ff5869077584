package sandboxes

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/agentsandbox/agentsandbox/engine"
	"github.com/agentsandbox/agentsandbox/record"
)

// box is one sandbox of the manager.
type box struct {
	m     *manager
	id    string
	owner string // the identity it belongs to (identity.go); set at reservation

	mu        sync.Mutex
	sb        *engine.Sandbox // nil while it is being opened
	info      Info
	labels    map[string]string
	execs     map[string]*execState
	ended     []string // ids of the ended execs, oldest first (recordExec)
	entries   []record.Entry
	seq       int
	snapshots []SnapshotInfo
	killing   bool
	killed    chan struct{} // closed when kill is done
	killErr   error
	stoppedAt time.Time // set on what is kept of a killed sandbox (manager.release)

	netMu sync.Mutex // one network.allow change at a time (network.go)

	watchers, watchedDirs int // directory watches and the directories they hold (files_watch.go)

	journal *os.File // journal.go; nil once the record is written
}

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }

// snapshot is the sandbox's info with live usage.
func (b *box) snapshot() Info {
	b.mu.Lock()
	info := b.info
	info.Labels = maps.Clone(b.info.Labels)
	sb := b.sb
	running := info.State == StateRunning
	b.mu.Unlock()
	if sb != nil && running {
		if u, err := sb.Session.Usage(); err == nil {
			info.Usage.CPUTimeNs = u.CPUTime.Nanoseconds()
			info.Usage.MemoryBytes = u.MemoryBytes
			info.Usage.PeakMemoryBytes = u.PeakMemoryBytes
			info.Usage.Pids = u.Pids
		}
		if gw := sb.Gateway(); gw != nil {
			st := gw.Stats()
			info.Usage.BytesOut, info.Usage.BytesIn = st.BytesOut, st.BytesIn
		}
	}
	return info
}

func (b *box) stopped() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.info.State == StateStopped
}

// expired says why the sandbox should stop now, or "".
func (b *box) expired(now time.Time) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.sb == nil || b.info.State != StateRunning || b.killing {
		return ""
	}
	select {
	case <-b.sb.Session.Done():
		return "exited: the sandbox's init ended"
	default:
	}
	if now.After(b.info.ExpiresAt) {
		return "expired"
	}
	busy := false
	for _, x := range b.execs {
		if x.running() {
			busy = true
		}
	}
	if !busy && now.Sub(b.info.LastActive) > b.info.IdleTimeout.D() {
		return "idle"
	}
	return ""
}

// kill stops the sandbox once: every running command, then the sandbox,
// then its record. Concurrent calls wait for the first.
func (b *box) kill(ctx context.Context, why string) error {
	b.mu.Lock()
	if b.killing {
		ch := b.killed
		b.mu.Unlock()
		<-ch
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.killErr
	}
	if b.sb == nil {
		b.mu.Unlock()
		return Errorf(CodeConflict, "sandbox %s is still being created", b.id)
	}
	b.killing, b.killed = true, make(chan struct{})
	execs := slices.Collect(maps.Values(b.execs))
	b.mu.Unlock()
	// Once stopped, its snapshots are the collector's (snapcollect.go).
	defer b.m.releaseSnapshots(b)

	for _, x := range execs {
		x.kill()
	}
	for _, x := range execs {
		<-x.recorded
	}
	b.mu.Lock()
	entries := slices.Clone(b.entries)
	labels := maps.Clone(b.labels)
	b.mu.Unlock()
	id, err := b.sb.Close(ctx, why, labels, entries)
	if !id.IsZero() {
		b.closeJournal() // the record is written; otherwise the next start writes it
		b.m.share(id)
	}

	b.mu.Lock()
	b.info.State, b.info.Ended = StateStopped, why
	if !id.IsZero() {
		b.info.Record = id.String()
	}
	b.killErr = err
	close(b.killed)
	b.mu.Unlock()
	b.m.release(b)
	return err
}

// workspacePath is the host directory of the sandbox's workspace.
func (b *box) workspacePath() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.sb.Workspace
}

func summaryCmd(argv []string) string {
	s := fmt.Sprintf("%q", argv)
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}
