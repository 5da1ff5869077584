package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentsandbox/agentsandbox/egress"
	"github.com/agentsandbox/agentsandbox/record"
)

type recordsNetOptions struct {
	recordsOptions
	step   string
	denied bool
}

// newRecordsNetCmd is `records net ID`: every connection, DNS query and
// firewall drop of a run's steps with egress, from their audit logs.
func newRecordsNetCmd(stdio Stdio, parent *recordsOptions) *cobra.Command {
	opts := recordsNetOptions{}
	cmd := &cobra.Command{
		Use: "net ID", Short: "List every network connection, DNS query and drop of a run (--json: the audit log lines)", Args: cobra.ExactArgs(1),
		Long: `net prints the audit log of each step with egress: one line per connection
(time, destination, the name and where it came from, allow or deny and the
rule that decided, upstream address, bytes each way, duration, error), each
DNS query, and the firewall's drop counters. A denied connection names the
network.allow entry that would allow it. The logs are blobs the record names,
verified as they are read.` + exitStatusHelp,
		Example: "  agentsandbox records net 1b9x\n  agentsandbox records net 1b9x --step fetch --denied\n  agentsandbox records net --json 1b9x | jq 'select(.allow == false)'",
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.recordsOptions = *parent
			return runRecordsNet(cmd.Context(), stdio, opts, args)
		},
	}
	cmd.Flags().BoolVar(&parent.JSON, "json", false, "print the audit log lines as stored (JSON lines)")
	cmd.Flags().StringVar(&opts.step, "step", "", "only this step")
	cmd.Flags().BoolVar(&opts.denied, "denied", false, "only denied connections and refused queries")
	return cmd
}

func runRecordsNet(ctx context.Context, stdio Stdio, opts recordsNetOptions, args []string) error {
	s, id, err := resolveRecord(ctx, stdio, opts.recordsOptions, args[0])
	if err != nil {
		return err
	}
	r, err := s.Get(id)
	if err != nil {
		return checkFailed(err)
	}
	found := false
	for _, st := range r.Steps {
		if opts.step != "" && st.Name != opts.step {
			continue
		}
		if st.Network == nil {
			continue
		}
		found = true
		raw, err := readBlob(s, st.Network.Log)
		if err != nil {
			return checkFailed(fmt.Errorf("step %q's network log: %w", st.Name, err))
		}
		if opts.JSON && !opts.denied {
			if _, err := stdio.Out.Write(raw); err != nil {
				return err
			}
			continue
		}
		lines, err := egress.ReadLog(strings.NewReader(string(raw)))
		if err != nil {
			return checkFailed(fmt.Errorf("step %q: %w", st.Name, err))
		}
		if err := printNetLog(stdio.Out, st, lines, opts); err != nil {
			return err
		}
	}
	if !found {
		if opts.step != "" {
			return invalid(fmt.Errorf("record %s has no step %q with network egress", id, opts.step))
		}
		_, err := fmt.Fprintf(stdio.Out, "record %s: no step had network egress (loopback only)\n", id)
		return err
	}
	return nil
}

func readBlob(s *record.Store, d record.Digest) ([]byte, error) {
	rc, err := s.OpenBlob(d)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

func printNetLog(out io.Writer, st record.Step, lines []egress.Line, opts recordsNetOptions) error {
	if opts.JSON { // --denied --json: the matching lines only
		for _, l := range lines {
			if c := l.Conn; c != nil && !c.Allow {
				if err := writeJSONLine(out, c); err != nil {
					return err
				}
			} else if q := l.Query; q != nil && q.Rcode != "NOERROR" {
				if err := writeJSONLine(out, q); err != nil {
					return err
				}
			}
		}
		return nil
	}
	n := st.Network
	fmt.Fprintf(out, "step %s: allow %s", st.Name, strings.Join(n.Allow, ", "))
	if len(n.Deny) > 0 {
		fmt.Fprintf(out, "; forbidden by policy %s", strings.Join(n.Deny, ", "))
	}
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tKIND\tDESTINATION\tNAME (FROM)\tDECISION\tRULE\tUPSTREAM\tOUT\tIN\tDURATION\tNOTE")
	for _, l := range lines {
		switch {
		case l.Conn != nil:
			c := l.Conn
			if opts.denied && c.Allow {
				continue
			}
			name := "-"
			if c.Name != "" {
				name = c.Name + " (" + string(c.NameSource) + ")"
			}
			note := c.Error
			if !c.Allow {
				note = c.Reason
			}
			fmt.Fprintf(tw, "%s\ttcp\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", c.Time.Local().Format("15:04:05.000"),
				dash(c.Dst), name, c.Verdict(), dash(c.Rule), dash(c.Upstream),
				humanBytes(c.BytesOut), humanBytes(c.BytesIn), (time.Duration(c.DurationMS) * time.Millisecond).String(), note)
		case l.Query != nil:
			q := l.Query
			if opts.denied && q.Rcode == "NOERROR" {
				continue
			}
			fmt.Fprintf(tw, "%s\tdns\t%s %s\t-\t%s\t-\t%s\t-\t-\t-\t%s\n", q.Time.Local().Format("15:04:05.000"),
				q.Name, q.QType, q.Rcode, dash(q.Answer), q.Reason)
		case l.Drops != nil && !opts.denied:
			d := l.Drops
			fmt.Fprintf(tw, "-\tdrops\t%d packets, %d bytes dropped by the firewall\t-\t-\t-\t-\t-\t-\t-\t%v\n", d.Packets, d.Bytes, d.By)
		case l.Rules != nil && !opts.denied:
			r := l.Rules
			fmt.Fprintf(tw, "%s\trules\tnetwork.allow is now [%s]\t-\t-\t-\t-\t-\t-\t-\tgranted or revoked on the running sandbox\n",
				r.Time.Local().Format("15:04:05.000"), strings.Join(r.Allow, ", "))
		case l.Truncated != nil:
			fmt.Fprintf(tw, "-\tlog\t%d lines not kept (the host keeps %d bytes of a step's network log)\t-\t-\t-\t-\t-\t-\t-\t-\n", l.Truncated.Lines, l.Truncated.Limit)
		}
	}
	return tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func writeJSONLine(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}
