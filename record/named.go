package record

// NamedBlobs adds to set every blob r names: its workflow file and lock,
// its inputs, each step's job spec, logs, outputs (their NARs) and
// network log, its decision log, and a sandbox's entries with the blobs
// their actions name (read from the store; an entry whose action cannot
// be read adds only its own digest). These are the blobs whoever may read
// r may be given: the server's ownership of stored content
// (sandboxes.Identity) is the records one owns.
func (s *Store) NamedBlobs(r *Record, set map[Digest]bool) {
	add := func(d Digest) {
		if !d.IsZero() {
			set[d] = true
		}
	}
	add(r.Workflow.FileDigest)
	if r.Workflow.Lock != nil {
		add(*r.Workflow.Lock)
	}
	for _, in := range r.Inputs {
		add(in.Digest)
	}
	for _, st := range r.Steps {
		add(st.JobDigest)
		add(st.Logs.Stdout)
		add(st.Logs.Stderr)
		if st.Logs.Console != nil {
			add(*st.Logs.Console)
		}
		for _, o := range st.Outputs {
			add(o.NarHash.Blob())
		}
		for _, d := range st.Inputs {
			add(d)
		}
		if st.Network != nil {
			add(st.Network.Log)
		}
	}
	if r.Policy != nil && r.Policy.DecisionLog != nil {
		add(*r.Policy.DecisionLog)
	}
	if r.Sandbox != nil {
		for _, e := range r.Sandbox.Entries {
			add(e.Digest)
			a, err := s.Action(e.Digest)
			if err != nil {
				continue
			}
			for _, d := range a.Blobs() {
				add(d)
			}
		}
	}
}
