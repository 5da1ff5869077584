package egress

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"time"
)

// Conn is the audit line of one TCP connection the step opened (or
// tried to), written when it ends.
type Conn struct {
	Type string    `json:"type"` // "conn"
	Time time.Time `json:"time"`
	Step string    `json:"step"`
	// Dst is the original destination, address:port, as the job dialled
	// it ("" for a request to the proxy endpoint naming only a host).
	Dst string `json:"dst,omitempty"`
	// Name and NameSource: the name the job asked for and how the
	// proxy learned it (dns, sni, host, connect).
	Name       string     `json:"name,omitempty"`
	NameSource NameSource `json:"name_source,omitempty"`
	// SNI and Host are what the client sent, when it sent them, even if
	// they only confirmed the name.
	SNI  string `json:"sni,omitempty"`
	Host string `json:"host,omitempty"`
	Decision
	Upstream   string `json:"upstream,omitempty"` // address:port dialled
	BytesOut   int64  `json:"bytes_out"`          // job → upstream
	BytesIn    int64  `json:"bytes_in"`           // upstream → job
	DurationMS int64  `json:"duration_ms"`
	Error      string `json:"error,omitempty"`
}

// Query is the audit line of one question to the step's resolver.
type Query struct {
	Type   string    `json:"type"` // "dns"
	Time   time.Time `json:"time"`
	Step   string    `json:"step"`
	Name   string    `json:"name"`
	QType  string    `json:"qtype"`
	Rcode  string    `json:"rcode"`            // NOERROR, NXDOMAIN, REFUSED, …
	Answer string    `json:"answer,omitempty"` // the private address given
	Reason string    `json:"reason,omitempty"`
	// Suppressed, on the one line a resolver writes after it stopped
	// logging queries, is how many it answered without a line of their
	// own.
	Suppressed int `json:"suppressed,omitempty"`
}

// Drops is the audit line of the firewall's drop counters, written once
// when the step's room is torn down.
type Drops struct {
	Type    string `json:"type"` // "drops"
	Step    string `json:"step"`
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
	// By chain or reason, such as "output", "input", "forward".
	By map[string]uint64 `json:"by,omitempty"`
}

// Truncated is the last line of a log that reached the host's bound on
// what it keeps: Lines more lines were not kept.
type Truncated struct {
	Type  string `json:"type"` // "truncated"
	Step  string `json:"step"`
	Lines int    `json:"lines"`
	Limit int    `json:"limit_bytes"`
}

// LineRules is the type of a RulesChange line.
const LineRules = "rules"

// RulesChange is the audit line of a change of a running sandbox's rules
// (granted or revoked egress): the rules in force from then on.
type RulesChange struct {
	Type  string    `json:"type"` // "rules"
	Time  time.Time `json:"time"`
	Step  string    `json:"step"`
	Allow []string  `json:"allow"`
	Deny  []string  `json:"deny"`
}

// Line is one decoded audit line: exactly one field is set.
type Line struct {
	Conn      *Conn
	Query     *Query
	Drops     *Drops
	Truncated *Truncated
	Rules     *RulesChange
}

// ReadLog decodes a step's audit log (JSON lines). An unknown type is an
// error, not skipped: the log is the project's own.
func ReadLog(r io.Reader) ([]Line, error) {
	var out []Line
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		b := sc.Bytes()
		if len(b) == 0 {
			continue
		}
		var head struct {
			Type string `json:"type"`
		}
		if err := json.Unmarshal(b, &head); err != nil {
			return nil, fmt.Errorf("network log line %d: %w", n, err)
		}
		var l Line
		var v any
		switch head.Type {
		case "conn":
			l.Conn = &Conn{}
			v = l.Conn
		case "dns":
			l.Query = &Query{}
			v = l.Query
		case "drops":
			l.Drops = &Drops{}
			v = l.Drops
		case "truncated":
			l.Truncated = &Truncated{}
			v = l.Truncated
		case LineRules:
			l.Rules = &RulesChange{}
			v = l.Rules
		default:
			return nil, fmt.Errorf("network log line %d: unknown type %q", n, head.Type)
		}
		if err := json.Unmarshal(b, v); err != nil {
			return nil, fmt.Errorf("network log line %d: %w", n, err)
		}
		out = append(out, l)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read network log: %w", err)
	}
	return out, nil
}

// Summary is what `records show` prints of a step's network log, and what
// the record keeps beside the log's digest.
type Summary struct {
	Allowed  int   `json:"allowed"`
	Denied   int   `json:"denied"`
	Failed   int   `json:"failed"` // allowed, but the upstream dial or copy failed
	Queries  int   `json:"queries"`
	NXDomain int   `json:"nxdomain"`
	Dropped  int64 `json:"dropped_packets"`
	// NotLogged counts lines past the host's bound on the log.
	NotLogged int   `json:"not_logged,omitempty"`
	BytesOut  int64 `json:"bytes_out"`
	BytesIn   int64 `json:"bytes_in"`
	// Blocked lists the distinct denied destinations, each with the
	// entry that would allow it, sorted.
	Blocked []Blocked `json:"blocked,omitempty"`
}

// Blocked is one distinct denied destination.
type Blocked struct {
	Target string `json:"target"`
	Rule   string `json:"rule,omitempty"` // the deny rule, for a forbidden one
	Hint   string `json:"hint,omitempty"`
	Count  int    `json:"count"`
}

// Summarize counts a log's lines.
func Summarize(lines []Line) Summary {
	var s Summary
	blocked := map[string]*Blocked{}
	for _, l := range lines {
		switch {
		case l.Conn != nil:
			c := l.Conn
			s.BytesOut += c.BytesOut
			s.BytesIn += c.BytesIn
			switch {
			case !c.Allow:
				s.Denied++
				t := c.Name
				if t == "" || (c.NameSource != FromDNS && c.NameSource != FromConnect) {
					t = c.Dst
				}
				b := blocked[t]
				if b == nil {
					b = &Blocked{Target: t, Hint: c.Hint}
					if c.Rule != "" {
						b.Rule = c.Rule
					}
					blocked[t] = b
				}
				b.Count++
			case c.Error != "":
				s.Failed++
			default:
				s.Allowed++
			}
		case l.Query != nil && l.Query.Suppressed > 0:
			s.Queries += l.Query.Suppressed
		case l.Query != nil:
			s.Queries++
			if l.Query.Rcode == "NXDOMAIN" {
				s.NXDomain++
			}
		case l.Drops != nil:
			s.Dropped += int64(l.Drops.Packets)
		case l.Truncated != nil:
			s.NotLogged += l.Truncated.Lines
		}
	}
	for _, b := range blocked {
		s.Blocked = append(s.Blocked, *b)
	}
	sort.Slice(s.Blocked, func(i, j int) bool { return s.Blocked[i].Target < s.Blocked[j].Target })
	return s
}
