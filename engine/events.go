package engine

import (
	"time"

	"github.com/agentsandbox/agentsandbox/policy"
	"github.com/agentsandbox/agentsandbox/vmrunner"
)

// EventKind names what happened.
type EventKind string

const (
	EventAdmitted EventKind = "admitted" // the policy decided on the resolved plan: Decision holds its warnings and denials
	EventPhase    EventKind = "phase"    // a run-level phase began: Line names it (realise, fetch, run, record)
	EventWarning  EventKind = "warning"  // Line is a warning for the user
	EventNote     EventKind = "note"     // Line says what apply decided for the user and why (auto isolation)
	EventStarted  EventKind = "started"  // Step began running
	EventLog      EventKind = "log"      // Line is one line of Step's console output
	EventFinished EventKind = "finished" // Step ended; Result holds how
	EventSkipped  EventKind = "skipped"  // Step did not run; Line says why
)

// Event is one entry of apply's progress stream (--json prints them as JSON lines).
type Event struct {
	Time   time.Time            `json:"time"`
	Kind   EventKind            `json:"kind"`
	Step   string               `json:"step,omitempty"`
	Line   string               `json:"line,omitempty"`
	Result *vmrunner.StepResult `json:"result,omitempty"`
	// Decision is the admission decision of an EventAdmitted.
	Decision *policy.Decision `json:"decision,omitempty"`
}
