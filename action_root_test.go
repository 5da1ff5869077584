package agentsandbox

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/agentsandbox/agentsandbox/internal/testtier"
	"github.com/agentsandbox/agentsandbox/record"
	"github.com/agentsandbox/agentsandbox/record/provenance"
)

// actionRunner plays the part of the GitHub runner for action.yml's
// steps: it evaluates the few expressions the action uses (and fails the
// test on any other), runs each run step with bash as the runner does, and
// keeps the steps' outputs and the PATH additions.
type actionRunner struct {
	t          *testing.T
	actionPath string
	temp       string
	inputs     map[string]string
	outputs    map[string]map[string]string // step id → name → value
	path       []string                     // $GITHUB_PATH additions
}

var (
	exprRe = regexp.MustCompile(`\$\{\{\s*(.*?)\s*\}\}`)
	cmpRe  = regexp.MustCompile(`^([a-z][A-Za-z0-9_.-]*)\s*(==|!=)\s*'([^']*)'$`)
)

func (r *actionRunner) value(ref string) string {
	r.t.Helper()
	parts := strings.Split(ref, ".")
	switch {
	case len(parts) == 2 && parts[0] == "inputs":
		v, ok := r.inputs[parts[1]]
		if !ok {
			r.t.Fatalf("inputs.%s: no such input", parts[1])
		}
		return v
	case len(parts) == 4 && parts[0] == "steps" && parts[2] == "outputs":
		return r.outputs[parts[1]][parts[3]]
	case ref == "github.action_path":
		return r.actionPath
	}
	r.t.Fatalf("expression %q: the test runner does not know it", ref)
	return ""
}

func (r *actionRunner) expand(s string) string {
	return exprRe.ReplaceAllStringFunc(s, func(m string) string {
		return r.value(exprRe.FindStringSubmatch(m)[1])
	})
}

// cond evaluates a step's if: terms joined by &&, each always() or a
// comparison with a quoted string. A step without one runs when nothing
// has failed.
func (r *actionRunner) cond(expr string, failed bool) bool {
	r.t.Helper()
	if expr == "" {
		return !failed
	}
	always := false
	for _, term := range strings.Split(expr, "&&") {
		term = strings.TrimSpace(term)
		if term == "always()" {
			always = true
			continue
		}
		m := cmpRe.FindStringSubmatch(term)
		if m == nil {
			r.t.Fatalf("if: %q: the test runner does not know %q", expr, term)
		}
		if eq := r.value(m[1]) == m[3]; eq != (m[2] == "==") {
			return false
		}
	}
	return always || !failed
}

// run runs the steps; it returns each step's exit status ("skipped",
// "uses" for an action step) and combined output by step name.
func (r *actionRunner) run(steps []ghStep) (map[string]int, map[string]string) {
	t := r.t
	status, logs := map[string]int{}, map[string]string{}
	failed := false
	for i, s := range steps {
		if !r.cond(s.If, failed) {
			status[s.Name] = -1
			continue
		}
		if s.Uses != "" {
			for k, v := range s.With {
				s.With[k] = r.expand(v)
			}
			status[s.Name] = -2
			continue
		}
		if s.Shell != "bash" {
			t.Fatalf("step %s: shell %q; the test runner runs bash", s.Name, s.Shell)
		}
		dir := filepath.Join(r.temp, "step-"+s.ID+"-"+string(rune('a'+i)))
		os.MkdirAll(dir, 0o755)
		script := filepath.Join(dir, "script.sh")
		os.WriteFile(script, []byte(s.Run), 0o644)
		ghOut, ghPath := filepath.Join(dir, "output"), filepath.Join(dir, "path")
		os.WriteFile(ghOut, nil, 0o644)
		os.WriteFile(ghPath, nil, 0o644)
		cmd := exec.Command("bash", "--noprofile", "--norc", "-eo", "pipefail", script)
		cmd.Dir = r.expand(s.WorkingDirectory)
		if cmd.Dir == "" {
			cmd.Dir = r.temp
		}
		env := append(os.Environ(),
			"PATH="+strings.Join(append(r.path, os.Getenv("PATH")), ":"),
			"RUNNER_TEMP="+r.temp, "GITHUB_ACTION_PATH="+r.actionPath,
			"GITHUB_OUTPUT="+ghOut, "GITHUB_PATH="+ghPath)
		for k, v := range s.Env {
			env = append(env, k+"="+r.expand(v))
		}
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		logs[s.Name] = string(out)
		code := 0
		if err != nil {
			ee, ok := err.(*exec.ExitError)
			if !ok {
				t.Fatalf("step %s: %v", s.Name, err)
			}
			code = ee.ExitCode()
			failed = true
		}
		status[s.Name] = code
		if b, err := os.ReadFile(ghOut); err == nil && s.ID != "" {
			r.outputs[s.ID] = map[string]string{}
			sc := bufio.NewScanner(bytes.NewReader(b))
			for sc.Scan() {
				if k, v, ok := strings.Cut(sc.Text(), "="); ok {
					r.outputs[s.ID][k] = v
				}
			}
		}
		if b, err := os.ReadFile(ghPath); err == nil {
			for _, p := range strings.Fields(string(b)) {
				r.path = append([]string{p}, r.path...)
			}
		}
	}
	return status, logs
}

// TestActionRunsWorkflow runs action.yml's steps as the runner would
// (building agentsandbox from this checkout, without installing packages
// or uploading) on a workflow whose second step fails, with a signing key:
// the failure is an annotation naming the step and the record, the bundle
// verifies on its own, its signed provenance verifies against the key,
// and the job fails with apply's status 1.
func TestActionRunsWorkflow(t *testing.T) {
	testtier.Root(t)
	testtier.Command(t, "root", "python3", "Debian: apt-get install python3")
	a := loadAction(t)
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	temp := t.TempDir()
	wf := filepath.Join(temp, "ci.yaml")
	os.WriteFile(wf, []byte(`apiVersion: agentsandbox.dev/v1
kind: Workflow
name: ci-demo
steps:
  - name: build
    run: "mkdir -p out && echo building | tee out/artifact.txt"
    outputs: [out/artifact.txt]
    resources: {timeout: 30s}
  - name: test
    needs: [build]
    run: "echo FAIL: TestParse; exit 3"
    resources: {timeout: 30s}
`), 0o644)
	inputs := map[string]string{}
	for k, in := range a.Inputs {
		if in.Default != nil {
			inputs[k] = *in.Default
		}
	}
	inputs["workflow"] = wf
	inputs["isolation"] = "namespace"
	inputs["install-packages"] = "false"
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	inputs["signing-key"] = string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
	r := &actionRunner{t: t, actionPath: wd, temp: temp, inputs: inputs, outputs: map[string]map[string]string{}}
	status, logs := r.run(a.Runs.Steps)
	dump := func() string {
		var b strings.Builder
		for _, s := range a.Runs.Steps {
			b.WriteString("== " + s.Name + "\n" + logs[s.Name])
		}
		return b.String()
	}

	last := a.Runs.Steps[len(a.Runs.Steps)-1].Name
	if status[last] != 1 {
		t.Fatalf("the job's last step exited %d, want apply's 1\n%s", status[last], dump())
	}
	id := r.outputs["apply"]["record-id"]
	if r.outputs["apply"]["exit-code"] != "1" || id == "" {
		t.Fatalf("apply outputs %v\n%s", r.outputs["apply"], dump())
	}
	applyLog := logs["Apply the workflow"]
	if !strings.Contains(applyLog, "::error title=agentsandbox step test failed::step test failed: exit status 3 (record "+id+")%0Alast output:%0AFAIL: TestParse") {
		t.Errorf("no annotation for the failed step:\n%s", applyLog)
	}
	dir := r.outputs["bundle"]["dir"]
	if dir == "" {
		t.Fatalf("no bundle\n%s", dump())
	}
	for _, f := range []string{"records/" + id + ".json", "events.jsonl", "apply.stderr"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("bundle: %v", err)
		}
	}
	s, err := record.OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	rid, err := record.ParseID(id)
	if err != nil {
		t.Fatal(err)
	}
	if problems, err := s.Verify(rid); err != nil || len(problems) != 0 {
		t.Errorf("verify the bundle: %v %v", problems, err)
	}
	// The provenance signed from the bundle verifies against the key, and
	// the key file is gone.
	env, err := os.Open(filepath.Join(dir, id+".intoto.json"))
	if err != nil {
		t.Fatalf("attestation: %v\n%s", err, dump())
	}
	defer env.Close()
	if problems := provenance.Verify(context.Background(), s, rid, env, pub); len(problems) != 0 {
		t.Errorf("verify the attestation: %v", problems)
	}
	if left, _ := filepath.Glob(filepath.Join(temp, "agentsandbox-key.*")); len(left) != 0 {
		t.Errorf("the signing key was left in %v", left)
	}
	// Upload was reached, with the bundle.
	for _, st := range a.Runs.Steps {
		if st.Uses != "" && (status[st.Name] != -2 || st.With["path"] != dir) {
			t.Errorf("upload step %s: status %d, path %q", st.Name, status[st.Name], st.With["path"])
		}
	}
}
