package sandboxes

import (
	"context"
	"time"

	"github.com/agentsandbox/agentsandbox/record"
)

// The shared store (docs/store.md): with Options.Remote, every record the
// manager writes (a sandbox's when it stops, a run's, one recovered from
// a journal at start) is pushed with every blob it names, blobs first and
// the record last, in the background: a kill does not wait on the
// network. Close waits for the pushes under way. A push that fails leaves
// the record in the state directory, whole, and is logged with the
// command that sends it later.

// maxPushes bounds the pushes under way at once.
const maxPushes = 4

// pushTimeout bounds one record's push.
const pushTimeout = 10 * time.Minute

// share pushes record id to the shared store, if there is one.
func (m *manager) share(id record.ID) {
	if m.o.Remote == nil || id.IsZero() {
		return
	}
	m.pushes.Add(1)
	go func() {
		defer m.pushes.Done()
		m.pushSlots <- struct{}{}
		defer func() { <-m.pushSlots }()
		ctx, cancel := context.WithTimeout(context.Background(), pushTimeout)
		defer cancel()
		if _, err := record.Push(ctx, m.o.Engine.Store, m.o.Remote, id); err != nil {
			m.o.Logf("record %s stays in this state directory only: %v (send it later with: agentsandbox records push %s --store URL)", id, err, id)
		}
	}()
}
