package agentsandbox

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/agentsandbox/agentsandbox/internal/testtier"
	"github.com/agentsandbox/agentsandbox/record"
	"go.yaml.in/yaml/v3"
)

// The GitHub Actions composite action (action.yml) and the example workflow
// in docs/ci.md, checked for structure, and the scripts they run.

type ghAction struct {
	Name        string              `yaml:"name"`
	Description string              `yaml:"description"`
	Author      string              `yaml:"author"`
	Branding    map[string]string   `yaml:"branding"`
	Inputs      map[string]ghInput  `yaml:"inputs"`
	Outputs     map[string]ghOutput `yaml:"outputs"`
	Runs        struct {
		Using string   `yaml:"using"`
		Steps []ghStep `yaml:"steps"`
	} `yaml:"runs"`
}

type ghInput struct {
	Description string  `yaml:"description"`
	Required    bool    `yaml:"required"`
	Default     *string `yaml:"default"`
}

type ghOutput struct {
	Description string `yaml:"description"`
	Value       string `yaml:"value"`
}

type ghStep struct {
	ID               string            `yaml:"id"`
	Name             string            `yaml:"name"`
	If               string            `yaml:"if"`
	Uses             string            `yaml:"uses"`
	Run              string            `yaml:"run"`
	Shell            string            `yaml:"shell"`
	WorkingDirectory string            `yaml:"working-directory"`
	Env              map[string]string `yaml:"env"`
	With             map[string]string `yaml:"with"`
}

type ghWorkflow struct {
	Name        string            `yaml:"name"`
	On          yaml.Node         `yaml:"on"`
	Permissions map[string]string `yaml:"permissions"`
	Jobs        map[string]struct {
		RunsOn         string   `yaml:"runs-on"`
		TimeoutMinutes int      `yaml:"timeout-minutes"`
		Steps          []ghStep `yaml:"steps"`
	} `yaml:"jobs"`
}

// decodeStrict decodes YAML with no unknown field and one document.
func decodeStrict(t *testing.T, name string, b []byte, v any) {
	t.Helper()
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

var (
	inputRef  = regexp.MustCompile(`\binputs\.([A-Za-z0-9_-]+)`)
	stepRef   = regexp.MustCompile(`\bsteps\.([A-Za-z0-9_-]+)\.outputs\.([A-Za-z0-9_-]+)`)
	exprOpen  = regexp.MustCompile(`\$\{\{`)
	thisUses  = regexp.MustCompile(`^(\./|agentsandbox/agentsandbox@)`)
	ghOutLine = regexp.MustCompile(`([A-Za-z0-9_-]+)=[^\n]*>> "\$GITHUB_OUTPUT"`)
)

// stepStrings is every string of a step an expression can be in.
func stepStrings(s ghStep) []string {
	out := []string{s.If, s.Uses, s.Run, s.WorkingDirectory}
	for _, v := range s.Env {
		out = append(out, v)
	}
	for _, v := range s.With {
		out = append(out, v)
	}
	return out
}

// checkSteps checks what action and workflow steps share: each runs a
// script with a shell or uses an action, ids are unique, every
// steps.ID.outputs.NAME names an earlier step, and (when outputs is
// given) one that writes that output.
func checkSteps(t *testing.T, where string, steps []ghStep, outputs func(ghStep) []string) map[string]ghStep {
	t.Helper()
	byID := map[string]ghStep{}
	for i, s := range steps {
		name := s.Name
		if name == "" {
			name = s.ID
		}
		if (s.Run == "") == (s.Uses == "") {
			t.Errorf("%s step %d (%s): want exactly one of run and uses", where, i, name)
		}
		if s.Run != "" && s.Shell == "" {
			t.Errorf("%s step %d (%s): run without shell", where, i, name)
		}
		for _, str := range stepStrings(s) {
			for _, m := range stepRef.FindAllStringSubmatch(str, -1) {
				ref, ok := byID[m[1]]
				if !ok {
					t.Errorf("%s step %d (%s): steps.%s is not an earlier step's id", where, i, name, m[1])
					continue
				}
				if outputs != nil && !slices.Contains(outputs(ref), m[2]) {
					t.Errorf("%s step %d (%s): step %s writes no output %q (it writes %v)", where, i, name, m[1], m[2], outputs(ref))
				}
			}
		}
		if s.ID != "" {
			if _, dup := byID[s.ID]; dup {
				t.Errorf("%s: step id %q twice", where, s.ID)
			}
			byID[s.ID] = s
		}
	}
	return byID
}

// writtenOutputs are the outputs a step of action.yml writes: NAME=... >>
// "$GITHUB_OUTPUT" lines, and record-id, which ci-annotate.py writes when
// given --output "$GITHUB_OUTPUT".
func writtenOutputs(s ghStep) []string {
	var out []string
	for _, m := range ghOutLine.FindAllStringSubmatch(s.Run, -1) {
		out = append(out, m[1])
	}
	if strings.Contains(s.Run, "ci-annotate.py") && strings.Contains(s.Run, `--output "$GITHUB_OUTPUT"`) {
		out = append(out, "record-id")
	}
	return out
}

func loadAction(t *testing.T) ghAction {
	t.Helper()
	b, err := os.ReadFile("action.yml")
	if err != nil {
		t.Fatal(err)
	}
	var a ghAction
	decodeStrict(t, "action.yml", b, &a)
	return a
}

func TestActionStructure(t *testing.T) {
	a := loadAction(t)
	if a.Runs.Using != "composite" {
		t.Errorf("runs.using %q, want composite", a.Runs.Using)
	}
	if a.Name == "" || a.Description == "" || len(a.Runs.Steps) == 0 {
		t.Errorf("name, description or steps missing")
	}
	steps := checkSteps(t, "action.yml", a.Runs.Steps, writtenOutputs)

	used := map[string]bool{}
	for i, s := range a.Runs.Steps {
		for _, str := range stepStrings(s) {
			for _, m := range inputRef.FindAllStringSubmatch(str, -1) {
				used[m[1]] = true
			}
		}
		// Values reach scripts through env, never spliced into them.
		if exprOpen.MatchString(s.Run) {
			t.Errorf("step %d (%s): ${{ }} inside run; pass the value through env", i, s.Name)
		}
		if s.Uses != "" && s.Uses != "actions/upload-artifact@v4" {
			t.Errorf("step %d (%s) uses %s; the action uses no action but actions/upload-artifact@v4", i, s.Name, s.Uses)
		}
	}
	for name, in := range a.Inputs {
		if in.Description == "" {
			t.Errorf("input %s has no description", name)
		}
		if !in.Required && in.Default == nil {
			t.Errorf("optional input %s has no default", name)
		}
		if !used[name] {
			t.Errorf("input %s is declared and never used", name)
		}
	}
	for name := range used {
		if _, ok := a.Inputs[name]; !ok {
			t.Errorf("inputs.%s is used and not declared", name)
		}
	}
	for name, o := range a.Outputs {
		ms := stepRef.FindAllStringSubmatch(o.Value, -1)
		if len(ms) != 1 {
			t.Errorf("output %s = %q: want one steps.ID.outputs.NAME", name, o.Value)
			continue
		}
		s, ok := steps[ms[0][1]]
		if !ok {
			t.Errorf("output %s refers to step %q, which has no such id", name, ms[0][1])
		} else if !slices.Contains(writtenOutputs(s), ms[0][2]) {
			t.Errorf("output %s: step %s writes no output %q", name, ms[0][1], ms[0][2])
		}
	}
	// The scripts the steps run exist.
	for _, s := range a.Runs.Steps {
		for _, m := range regexp.MustCompile(`scripts/[A-Za-z0-9_.-]+`).FindAllString(s.Run, -1) {
			if _, err := os.Stat(m); err != nil {
				t.Errorf("step %s runs %s: %v", s.Name, m, err)
			}
		}
	}
}

// exampleWorkflow is the ```yaml block of docs/ci.md that is a workflow.
func exampleWorkflow(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("docs", "ci.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllSubmatch(b, -1)
	if len(m) != 1 {
		t.Fatalf("docs/ci.md has %d yaml blocks, want the one example workflow", len(m))
	}
	return m[0][1]
}

func TestCIDocExampleWorkflow(t *testing.T) {
	a := loadAction(t)
	var w ghWorkflow
	decodeStrict(t, "docs/ci.md example", exampleWorkflow(t), &w)
	if len(w.Jobs) == 0 || w.On.Kind == 0 {
		t.Fatal("the example has no jobs or no on:")
	}
	usesAction := 0
	for name, j := range w.Jobs {
		if j.RunsOn == "" {
			t.Errorf("job %s: no runs-on", name)
		}
		where := "docs/ci.md job " + name
		steps := checkSteps(t, where, j.Steps, nil)
		for _, s := range j.Steps {
			if exprOpen.MatchString(s.Run) {
				t.Errorf("%s step %s: ${{ }} inside run; pass the value through env", where, s.Name)
			}
			if !thisUses.MatchString(s.Uses) {
				continue
			}
			usesAction++
			for k := range s.With {
				if _, ok := a.Inputs[k]; !ok {
					t.Errorf("%s: with.%s is not an input of action.yml", where, k)
				}
			}
			for k, in := range a.Inputs {
				if _, ok := s.With[k]; in.Required && !ok {
					t.Errorf("%s: the required input %s is not given", where, k)
				}
			}
		}
		// steps.ID.outputs.NAME of the action's step are its outputs.
		for _, s := range j.Steps {
			for _, str := range stepStrings(s) {
				for _, m := range stepRef.FindAllStringSubmatch(str, -1) {
					if ref := steps[m[1]]; thisUses.MatchString(ref.Uses) {
						if _, ok := a.Outputs[m[2]]; !ok {
							t.Errorf("%s: steps.%s.outputs.%s is not an output of action.yml", where, m[1], m[2])
						}
					}
				}
			}
		}
	}
	if usesAction == 0 {
		t.Error("the example never uses the action")
	}
}

func python(t *testing.T) string {
	return testtier.Command(t, "pure", "python3", "Debian: apt-get install python3; scripts/setup.sh installs it")
}

func TestCIAnnotate(t *testing.T) {
	py := python(t)
	const record = "06b8c8570ws4dcavwajfh02mlh0cv1k03c2zny5ismpwbfgpsd3x"
	for _, c := range []struct {
		name, events, stderr string
		want                 []string
		record               string
	}{
		{"failed", "failed.events.jsonl", "failed.stderr", []string{
			"::error title=agentsandbox step test failed::step test failed: exit status 3 (record " + record + ")%0Alast output:%0AFAIL: TestParse",
			`::notice title=agentsandbox step package skipped::needs "test", which did not succeed (record ` + record + ")",
			`::warning title=agentsandbox::step "build": outputs is empty but "test" needs it; declare the outputs the later steps use`,
			`::warning title=agentsandbox::step "test": outputs is empty but "package" needs it; declare the outputs the later steps use`,
		}, record},
		{"denied", "denied.events.jsonl", "denied.stderr", []string{
			`::error title=agentsandbox apply::policy denied the workflow (decision sha256:b44f97ff966c0867e2c765be80491a2bbd14abf7276421fa55e30ee09be3e2dd):%0Adeny: step "f": resources.vcpu 64 is above the ceiling 16 (data.agentsandbox.ceilings.vcpu)`,
		}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			ghOut := filepath.Join(t.TempDir(), "github_output")
			cmd := exec.Command(py, "scripts/ci-annotate.py", filepath.Join("testdata", "ci", c.events),
				"--stderr", filepath.Join("testdata", "ci", c.stderr), "--output", ghOut)
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("%s: %v", cmd, err)
			}
			got := strings.Split(strings.TrimSpace(string(out)), "\n")
			if !slices.Equal(got, c.want) {
				t.Errorf("annotations:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(c.want, "\n"))
			}
			written, _ := os.ReadFile(ghOut)
			want := ""
			if c.record != "" {
				want = "record-id=" + c.record + "\n"
			}
			if string(written) != want {
				t.Errorf("$GITHUB_OUTPUT got %q, want %q", written, want)
			}
		})
	}
}

// TestCIAnnotateEscapes: a step's output cannot end the annotation or
// start a workflow command of its own.
func TestCIAnnotateEscapes(t *testing.T) {
	py := python(t)
	events := filepath.Join(t.TempDir(), "events.jsonl")
	os.WriteFile(events, []byte(`{"kind":"log","step":"a:b,c","line":"::error::forged 100%"}
{"kind":"finished","step":"a:b,c","result":{"status":"timed_out","detail":"killed\r\nafter 1m"}}
`), 0o644)
	out, err := exec.Command(py, "scripts/ci-annotate.py", events).Output()
	if err != nil {
		t.Fatal(err)
	}
	want := "::error title=agentsandbox step a%3Ab%2Cc timed_out::step a:b,c timed_out: killed%0D%0Aafter 1m%0Alast output:%0A::error::forged 100%25\n"
	if string(out) != want {
		t.Errorf("got  %q\nwant %q", out, want)
	}
}

// TestCIBundleVerifies: ci-bundle.py copies a record and exactly the blobs
// it names, and the copy verifies as a state directory of its own.
func TestCIBundleVerifies(t *testing.T) {
	py := python(t)
	state := t.TempDir()
	s, err := record.OpenStore(state)
	if err != nil {
		t.Fatal(err)
	}
	put := func(content string) record.Digest {
		d, _, err := s.PutBlob(strings.NewReader(content))
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	out := filepath.Join(t.TempDir(), "out")
	os.MkdirAll(out, 0o755)
	os.WriteFile(filepath.Join(out, "model.bin"), []byte("weights"), 0o644)
	nar, size, err := s.PutNAR(out)
	if err != nil {
		t.Fatal(err)
	}
	put("a blob of another run")
	dlog := put(`{"decision_id":"sha256:` + strings.Repeat("a", 64) + `","bundles":{"agentsandbox":{"revision":"sha256:` + strings.Repeat("b", 64) + `"}}}` + "\n")
	rec := &record.Record{
		Version: record.Version, ToolVersion: "test",
		Workflow: record.Workflow{Name: "w", FileDigest: put("name: w\n"), CanonicalHash: record.DigestOf([]byte("canonical, not a blob"))},
		Policy: &record.Policy{DecisionID: "sha256:" + strings.Repeat("a", 64), BundleDigest: "sha256:" + strings.Repeat("b", 64),
			InputDigest: "sha256:" + strings.Repeat("c", 64), Allowed: true, Deny: []string{}, Warn: []string{}, DecisionLog: &dlog},
		Status: record.StatusSucceeded,
		Steps: []record.Step{{Name: "s", Isolation: "namespace", Status: record.StatusSucceeded,
			JobDigest: put(`{"step":"s"}`), Logs: record.Logs{Stdout: put("hi\n"), Stderr: put("")},
			Outputs: []record.Output{{Path: "out", NarHash: nar, NarSize: size}}}},
	}
	id, err := s.Put(rec)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "bundle")
	cmd := exec.Command(py, "scripts/ci-bundle.py", "--state-dir", state, "--to", dst, id.String())
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", cmd, err, b)
	}
	blobs, _ := filepath.Glob(filepath.Join(dst, "blobs", "*", "*"))
	if len(blobs) != 6 { // workflow file, decision log, job, stdout, stderr, output NAR
		t.Errorf("%d blobs in the bundle, want 6: %v", len(blobs), blobs)
	}
	b, err := record.OpenStore(dst)
	if err != nil {
		t.Fatal(err)
	}
	if problems, err := b.Verify(id); err != nil || len(problems) != 0 {
		t.Errorf("verify the bundle: %v %v", problems, err)
	}
	if err := exec.Command(py, "scripts/ci-bundle.py", "--state-dir", state, "--to", dst, "06b8c857").Run(); err == nil {
		t.Error("a short id was taken")
	}
}
