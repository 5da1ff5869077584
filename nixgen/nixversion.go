package nixgen

import (
	"encoding/json"
	"time"

	"github.com/agentsandbox/agentsandbox/workflow"
)

// MinNixVersion is the oldest Nix that today's nixpkgs and the default
// microvm.nix evaluate with: nixpkgs' lib has refused older Nix since
// 2025-08 (lib/minver.nix, later lib/minfeatures.nix), and microvm.nix's
// store disk uses unsafeDiscardReferences, stable from 2.18.
const MinNixVersion = "2.18"

// nixpkgsNeedsMinNixSince is when nixpkgs' lib began to require
// MinNixVersion (nixpkgs.lib commit 4b24705a, 2025-08-12): a nixpkgs whose
// lock says it is older evaluates with an older Nix.
var nixpkgsNeedsMinNixSince = time.Date(2025, 8, 12, 0, 0, 0, 0, time.UTC)

// NixRequirement is the oldest Nix the flake Generate makes for a
// workflow can be evaluated with, and why.
type NixRequirement struct {
	Version string   // "" when nothing is known to need a newer Nix than any flakes-capable one
	Why     []string // one reason a clause, for the error
}

// RequiredNix is what w's generated flake needs of Nix, before anything is
// evaluated. lock is the workflow's lock file (<workflow>.lock, a
// flake.lock), or nil: a nixpkgs commit's age cannot be known without
// fetching it, so without a lock that says otherwise the pinned nixpkgs is
// taken to be one of today's. A workflow with no nixpkgs has no flake and
// needs nothing.
func RequiredNix(w *workflow.Workflow, lock []byte) NixRequirement {
	var r NixRequirement
	if w == nil || w.Nixpkgs == nil {
		return r
	}
	if t, ok := lockedLastModified(lock, "nixpkgs"); !ok {
		r.Why = append(r.Why, "nixpkgs since 2025-08 (release 25.11) refuses older Nix, and the workflow's "+
			"nixpkgs is not locked yet, so its age is not known")
	} else if !t.Before(nixpkgsNeedsMinNixSince) {
		r.Why = append(r.Why, "the workflow's nixpkgs is of "+t.Format("2006-01-02")+
			", and nixpkgs since 2025-08 (release 25.11) refuses older Nix")
	}
	if _, isDefault := microvmPin(w); isDefault {
		for _, s := range w.Steps {
			if s.Isolation == workflow.IsolationVM {
				r.Why = append(r.Why, "step "+s.Name+"'s VM is built with microvm.nix "+DefaultMicrovmRev[:12]+
					" (agentsandbox's default), whose store disk needs unsafeDiscardReferences")
				break
			}
		}
	}
	if len(r.Why) > 0 {
		r.Version = MinNixVersion
	}
	return r
}

// lockedLastModified reads a flake.lock's locked lastModified of the root's
// input name.
func lockedLastModified(lock []byte, name string) (time.Time, bool) {
	if len(lock) == 0 {
		return time.Time{}, false
	}
	var l struct {
		Root  string `json:"root"`
		Nodes map[string]struct {
			Inputs map[string]json.RawMessage `json:"inputs"`
			Locked struct {
				LastModified int64 `json:"lastModified"`
			} `json:"locked"`
		} `json:"nodes"`
	}
	if json.Unmarshal(lock, &l) != nil {
		return time.Time{}, false
	}
	node := name
	if root, ok := l.Nodes[l.Root]; ok {
		var n string
		if json.Unmarshal(root.Inputs[name], &n) == nil && n != "" {
			node = n
		}
	}
	lm := l.Nodes[node].Locked.LastModified
	if lm <= 0 {
		return time.Time{}, false
	}
	return time.Unix(lm, 0).UTC(), true
}
