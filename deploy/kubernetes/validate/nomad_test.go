package validate

import (
	"os"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// TestNomadJobParses checks deploy/nomad's job with HCL's own parser: its
// syntax, and that it is a system job whose task uses raw_exec to run serve.
// Nomad's own job validation is not run (Nomad does not build here).
func TestNomadJobParses(t *testing.T) {
	const path = "../../nomad/agentsandbox-serve.nomad.hcl"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f, diags := hclparse.NewParser().ParseHCL(b, path)
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	body := f.Body.(*hclsyntax.Body)
	job := only(t, body, "job")
	if attr(t, job.Body, "type") != "system" {
		t.Errorf("job type %q, want system", attr(t, job.Body, "type"))
	}
	task := only(t, only(t, job.Body, "group").Body, "task")
	if attr(t, task.Body, "driver") != "raw_exec" {
		t.Errorf("driver %q, want raw_exec", attr(t, task.Body, "driver"))
	}
	if c := attr(t, only(t, task.Body, "config").Body, "command"); c != "/usr/local/bin/agentsandbox" {
		t.Errorf("command %q", c)
	}
}

func only(t *testing.T, b *hclsyntax.Body, typ string) *hclsyntax.Block {
	t.Helper()
	var found []*hclsyntax.Block
	for _, blk := range b.Blocks {
		if blk.Type == typ {
			found = append(found, blk)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d %q blocks, want 1", len(found), typ)
	}
	return found[0]
}

func attr(t *testing.T, b *hclsyntax.Body, name string) string {
	t.Helper()
	a, ok := b.Attributes[name]
	if !ok {
		t.Fatalf("no attribute %q", name)
	}
	v, diags := a.Expr.Value(&hcl.EvalContext{})
	if diags.HasErrors() {
		t.Fatalf("%s: %s", name, diags.Error())
	}
	return v.AsString()
}
