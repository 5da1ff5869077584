package workflow

import (
	"fmt"
	"strings"
	"testing"
)

// genWorkflow writes a workflow of n steps; step i needs up to three earlier
// steps, so the DAG is wide and deep.
func genWorkflow(n int) []byte {
	var b strings.Builder
	b.WriteString("apiVersion: agentsandbox.dev/v1\nkind: Workflow\nname: big\n")
	b.WriteString("nixpkgs: github:NixOS/nixpkgs/8f3e1f807051e32d8c95cd12b9b421623850a34d\n")
	b.WriteString("defaults:\n  resources: {memory: 1GiB, timeout: 10m}\n  env: {COMMON: \"1\"}\n")
	b.WriteString("inputs:\n  data: {source: https://example.com/d.csv, sha256: " + strings.Repeat("ab", 32) + "}\n")
	b.WriteString("steps:\n")
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "  - name: step-%d\n    run: |\n      echo step %d\n      echo done > out/%d\n", i, i, i)
		fmt.Fprintf(&b, "    packages: [python3, python3Packages.numpy]\n    outputs: [out/%d]\n", i)
		fmt.Fprintf(&b, "    env: {STEP: \"%d\"}\n", i)
		fmt.Fprintf(&b, "    resources: {vcpu: %d, pids: 128}\n", 1+i%4)
		if i%10 == 0 {
			b.WriteString("    inputs: [data]\n    network: {allow: [\"example.com:443\", \"10.0.0.0/8:5432\"]}\n")
		}
		if i > 0 {
			b.WriteString("    needs: [")
			for j, d := range []int{i - 1, i / 2, i / 3} {
				if j > 0 {
					b.WriteString(", ")
				}
				fmt.Fprintf(&b, "step-%d", d)
			}
			b.WriteString("]\n")
		}
	}
	return []byte(b.String())
}

// BenchmarkParse1000 parses, validates and canonicalises a 1,000-step
// workflow (target: under 50 ms; see docs/benchmarks.md).
func BenchmarkParse1000(b *testing.B) {
	data := genWorkflow(1000)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		w, err := Parse("big.yaml", data)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := w.Canonical(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkYAMLDecode1000 is the baseline: only the YAML decode into a
// yaml.Node, which any parser with positions must pay.
func BenchmarkYAMLDecode1000(b *testing.B) {
	data := genWorkflow(1000)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		p := &parser{file: "big.yaml"}
		if p.decode(data) == nil {
			b.Fatal(p.errs.Error())
		}
	}
}

func TestGeneratedWorkflowValid(t *testing.T) {
	w, err := Parse("big.yaml", genWorkflow(50))
	if err != nil {
		t.Fatal(err)
	}
	if len(w.Steps) != 50 || len(w.Waves()) < 2 {
		t.Fatalf("steps %d waves %d", len(w.Steps), len(w.Waves()))
	}
}
