package record

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// WriteText writes d for people: a section per part of the run that
// differs, fields as "name: A -> B", measurements with their units and
// deltas, and "identical" when only measurements differ (docs/records.md).
func (d *RecordDiff) WriteText(w io.Writer) error {
	var b strings.Builder
	for _, r := range []struct {
		name   string
		id     ID
		parent *ID
	}{{"a", d.A, d.ParentA}, {"b", d.B, d.ParentB}} {
		fmt.Fprintf(&b, "%s  %s", r.name, r.id)
		if r.parent != nil {
			fmt.Fprintf(&b, " (rerun of %s)", r.parent)
		}
		b.WriteString("\n")
	}
	if d.Identical {
		b.WriteString("identical")
		if len(d.Measured) > 0 || len(d.Steps) > 0 {
			b.WriteString(" (only measurements differ)")
		}
		b.WriteString("\n")
	}
	section := func(title string, list []Change) {
		if len(list) == 0 {
			return
		}
		b.WriteString(title + "\n")
		writeChanges(&b, "  ", list)
	}
	section("run", d.Run)
	if w := d.Workflow; w != nil {
		b.WriteString("workflow\n")
		writeChanges(&b, "  ", w.Changes)
		for _, f := range w.Fields {
			switch f.Change {
			case Added:
				fmt.Fprintf(&b, "  + %s: %s\n", f.Path, yamlValue(f.B))
			case Removed:
				fmt.Fprintf(&b, "  - %s: %s\n", f.Path, yamlValue(f.A))
			default:
				fmt.Fprintf(&b, "  ~ %s: %s -> %s\n", f.Path, yamlValue(f.A), yamlValue(f.B))
			}
		}
	}
	if p := d.Policy; p != nil {
		b.WriteString("policy\n")
		writeChanges(&b, "  ", p.Changes)
		for _, l := range []struct {
			sign, what string
			list       []string
		}{{"+", "deny", p.DenyAdded}, {"-", "deny", p.DenyRemoved}, {"+", "warn", p.WarnAdded}, {"-", "warn", p.WarnRemoved}} {
			for _, s := range l.list {
				fmt.Fprintf(&b, "  %s %s: %s\n", l.sign, l.what, s)
			}
		}
	}
	if len(d.Inputs) > 0 {
		b.WriteString("inputs\n")
		for _, in := range d.Inputs {
			switch in.Change {
			case Added:
				fmt.Fprintf(&b, "  + %s: %s %s %s (%s)\n", in.Name, in.B.Kind, in.B.Source, in.B.Digest, sizeText(in.B.Size))
			case Removed:
				fmt.Fprintf(&b, "  - %s: %s %s %s (%s)\n", in.Name, in.A.Kind, in.A.Source, in.A.Digest, sizeText(in.A.Size))
			default:
				fmt.Fprintf(&b, "  ~ %s\n", in.Name)
				var c changes
				c.cmp("kind", in.A.Kind, in.B.Kind)
				c.cmp("source", in.A.Source, in.B.Source)
				c.cmp("commit", opt(in.A.Commit), opt(in.B.Commit))
				c.cmp("format", string(in.A.Format), string(in.B.Format))
				c.cmp("digest", in.A.Digest.String(), in.B.Digest.String())
				c.cmp("size", sizeText(in.A.Size), sizeText(in.B.Size))
				writeChanges(&b, "      ", c.list)
			}
		}
	}
	section("host", d.Host)
	for _, st := range d.Steps {
		switch st.Change {
		case Added, Removed:
			fmt.Fprintf(&b, "step %s: %s\n", st.Name, st.Change)
			continue
		case Unchanged:
			fmt.Fprintf(&b, "step %s: unchanged\n", st.Name)
		default:
			fmt.Fprintf(&b, "step %s\n", st.Name)
		}
		writeChanges(&b, "  ", st.Fields)
		if c := st.Closure; c != nil {
			fmt.Fprintf(&b, "  closure: %d added, %d removed, %d changed\n", len(c.Added), len(c.Removed), len(c.Changed))
			for _, p := range c.Added {
				fmt.Fprintf(&b, "    + %s\n", p.Path)
			}
			for _, p := range c.Removed {
				fmt.Fprintf(&b, "    - %s\n", p.Path)
			}
			for _, p := range c.Changed {
				fmt.Fprintf(&b, "    ~ %s: %s -> %s\n", p.Path, p.NarHashA, p.NarHashB)
			}
		}
		for _, o := range st.Outputs {
			writeOutputChange(&b, o)
		}
		if len(st.Measured) > 0 {
			fmt.Fprintf(&b, "  measured: %s\n", measuredText(st.Measured))
		}
	}
	if len(d.Measured) > 0 {
		fmt.Fprintf(&b, "run measured: %s\n", measuredText(d.Measured))
	}
	for _, n := range d.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func writeChanges(b *strings.Builder, indent string, list []Change) {
	for _, c := range list {
		fmt.Fprintf(b, "%s%s: %s -> %s\n", indent, c.Field, valueText(c.A), valueText(c.B))
	}
}

func writeOutputChange(b *strings.Builder, o OutputChange) {
	switch o.Change {
	case Added:
		fmt.Fprintf(b, "  output %s: added (%s, NAR %s)\n", o.Path, o.NarHashB, sizeText(o.NarSizeB))
		return
	case Removed:
		fmt.Fprintf(b, "  output %s: removed (was %s, NAR %s)\n", o.Path, o.NarHashA, sizeText(o.NarSizeA))
		return
	}
	fmt.Fprintf(b, "  output %s: changed, %s (%s) -> %s (%s)\n", o.Path, o.NarHashA, sizeText(o.NarSizeA), o.NarHashB, sizeText(o.NarSizeB))
	if o.Files == nil {
		return
	}
	for _, f := range o.Files.Files {
		switch f.Change {
		case ChangeAdded:
			fmt.Fprintf(b, "    + %s %s\n", f.Path, entryText(f.TypeB, f.SizeB, f.LinkB))
		case ChangeRemoved:
			fmt.Fprintf(b, "    - %s %s\n", f.Path, entryText(f.TypeA, f.SizeA, f.LinkA))
		case ChangeModified:
			if f.TypeA == "symlink" {
				fmt.Fprintf(b, "    ~ %s: symlink to %s -> %s\n", f.Path, f.LinkA, f.LinkB)
			} else {
				fmt.Fprintf(b, "    ~ %s: contents %s -> %s (%s)\n", f.Path, sizeText(f.SizeA), sizeText(f.SizeB), signed(f.SizeB-f.SizeA, "bytes"))
			}
		default: // type, mode
			fmt.Fprintf(b, "    ~ %s: %s -> %s\n", f.Path, entryText(f.TypeA, f.SizeA, f.LinkA), entryText(f.TypeB, f.SizeB, f.LinkB))
		}
	}
	if o.Files.Omitted > 0 {
		fmt.Fprintf(b, "    ... and %d more\n", o.Files.Omitted)
	}
}

// entryText describes one side of a FileDiff: "(regular, 12 B)",
// "(symlink to x)", "(directory)".
func entryText(typ string, size int64, link string) string {
	switch typ {
	case "regular", "executable":
		return "(" + typ + ", " + sizeText(size) + ")"
	case "symlink":
		return "(symlink to " + link + ")"
	}
	return "(" + typ + ")"
}

func valueText(v any) string {
	switch v := v.(type) {
	case nil:
		return "none"
	case string:
		if v == "" || strings.ContainsAny(v, "\n\r") {
			return strconv.Quote(v) // one change, one line
		}
		return v
	}
	return fmt.Sprint(v)
}

// yamlValue prints a workflow value on one line: scalars as they are,
// mappings and lists as JSON.
func yamlValue(v any) string {
	switch v.(type) {
	case map[string]any, []any:
		b, err := json.Marshal(v)
		if err == nil {
			return string(b)
		}
	}
	return valueText(v)
}

func measuredText(list []Measurement) string {
	parts := make([]string, 0, len(list))
	for _, m := range list {
		parts = append(parts, fmt.Sprintf("%s %s -> %s (%s)", measureName(m.Field), unitText(m.A, m.Unit), unitText(m.B, m.Unit), signed(m.Delta, m.Unit)))
	}
	return strings.Join(parts, ", ")
}

// measureName is how the text names a measured field.
func measureName(field string) string {
	switch field {
	case "durationMs":
		return "duration"
	case "usage.cpuTimeNs":
		return "cpu"
	case "usage.peakMemoryBytes":
		return "peak memory"
	case "usage.pidsPeak":
		return "pids"
	case "usage.throttledNs":
		return "throttled"
	case "usage.oomKills":
		return "oom kills"
	case "network.bytesOut":
		return "sent"
	case "network.bytesIn":
		return "received"
	case "policy.evalTimeNs":
		return "policy eval"
	}
	return field
}

func unitText(n int64, unit string) string {
	switch unit {
	case "ms":
		return strconv.FormatInt(n, 10) + " ms"
	case "ns": // a millisecond or more in ms, less in µs
		if n >= 1e6 || n <= -1e6 {
			return strconv.FormatFloat(float64(n)/1e6, 'f', 1, 64) + " ms"
		}
		return strconv.FormatInt(n/1e3, 10) + " µs"
	case "bytes":
		return sizeText(n)
	}
	return strconv.FormatInt(n, 10)
}

func signed(n int64, unit string) string {
	if n < 0 {
		return "-" + unitText(-n, unit)
	}
	return "+" + unitText(n, unit)
}

// sizeText prints bytes in B, KiB or MiB.
func sizeText(n int64) string {
	switch {
	case n < 1<<10 && n > -(1<<10):
		return strconv.FormatInt(n, 10) + " B"
	case n < 1<<20 && n > -(1<<20):
		return strconv.FormatFloat(float64(n)/(1<<10), 'f', 1, 64) + " KiB"
	}
	return strconv.FormatFloat(float64(n)/(1<<20), 'f', 1, 64) + " MiB"
}
