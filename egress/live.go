package egress

import "sync/atomic"

// Live holds the rules in force for a step whose rules can change while
// it runs: a long-lived sandbox (agentsandbox serve) whose egress is
// granted or revoked. The proxy and the resolver take the rules once per
// connection or query, so a change applies to the next connection and
// query; connections already open keep going, as with a firewall that
// tracks connections. The DNS answers given before a revoke stay mapped,
// but a connection to such an address is judged by the rules then in
// force.
type Live struct {
	p atomic.Pointer[Rules]
}

// NewLive holds r.
func NewLive(r *Rules) *Live {
	l := &Live{}
	l.Store(r)
	return l
}

// Load is the rules in force.
func (l *Live) Load() *Rules { return l.p.Load() }

// Store replaces the rules; nil is kept as no rules (everything denied).
func (l *Live) Store(r *Rules) {
	if r == nil {
		r = &Rules{}
	}
	l.p.Store(r)
}

// Entries are the allow and deny entries of the rules, as written.
func (r *Rules) Entries() (allow, deny []string) {
	allow, deny = []string{}, []string{}
	for _, a := range r.Allow {
		allow = append(allow, a.Entry)
	}
	for _, d := range r.Deny {
		deny = append(deny, d.Entry)
	}
	return allow, deny
}
