package sandboxes

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/agentsandbox/agentsandbox/workflow"
)

// stepName is the name of a sandbox's one step (it names its netns and
// cgroup beside the sandbox's id).
const stepName = "sandbox"

// specWorkflow turns a Spec into the one-step workflow the sandbox runs,
// through the workflow parser, so that a spec takes exactly a step's
// fields, units and defaults, and is refused with the parser's messages.
// A template ("FILE#STEP") must lie in templateDir; it gives the step and
// the workflow's nixpkgs, microvm, defaults and the inputs that step uses,
// and the spec's fields override the step's.
func specWorkflow(s Spec, id, templateDir string) (*workflow.Workflow, []byte, string, error) {
	doc := map[string]any{"apiVersion": workflow.APIVersion, "kind": workflow.Kind}
	step := map[string]any{}
	filename := "sandbox-spec.json"
	if s.Template != "" {
		var err error
		if doc, step, filename, err = templateStep(s.Template, templateDir); err != nil {
			return nil, nil, "", err
		}
	}
	doc["name"] = "sandbox-" + id
	step["name"] = stepName
	if _, ok := step["run"]; !ok {
		step["run"] = "# a long-lived sandbox: its commands arrive through the API"
	}
	delete(step, "needs")
	delete(step, "outputs")
	if s.Isolation != "" {
		step["isolation"] = s.Isolation
	}
	if len(s.Packages) > 0 {
		step["packages"] = s.Packages
	}
	if len(s.Resources) > 0 {
		res, _ := step["resources"].(map[string]any)
		if res == nil {
			res = map[string]any{}
		}
		for k, v := range s.Resources {
			res[k] = v
		}
		step["resources"] = res
	}
	if s.Network != nil {
		step["network"] = map[string]any{"allow": s.Network.Allow}
	}
	if len(s.Env) > 0 {
		env, _ := step["env"].(map[string]any)
		if env == nil {
			env = map[string]any{}
		}
		for k, v := range s.Env {
			env[k] = v
		}
		step["env"] = env
	}
	doc["steps"] = []any{step}
	raw, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, nil, "", Errorf(CodeBadRequest, "sandbox spec: %v", err)
	}
	w, err := workflow.Parse(filename, raw)
	if err != nil {
		return nil, nil, "", Errorf(CodeBadRequest, "sandbox spec: %v", err)
	}
	return w, raw, filename, nil
}

// templateStep reads FILE#STEP from dir: the workflow's document with
// only what the step needs, and the step's own map.
func templateStep(ref, dir string) (map[string]any, map[string]any, string, error) {
	if dir == "" {
		return nil, nil, "", Errorf(CodeBadRequest, "template %q: this server takes no templates; start it with --templates DIR to allow workflow files from DIR as templates", ref)
	}
	file, name, ok := strings.Cut(ref, "#")
	if !ok || file == "" || name == "" {
		return nil, nil, "", Errorf(CodeBadRequest, "template %q: want FILE#STEP, such as ci.yaml#test", ref)
	}
	if err := checkLength("template file", file); err != nil {
		return nil, nil, "", err
	}
	if !filepath.IsLocal(file) {
		return nil, nil, "", Errorf(CodeBadRequest, "template %q: the file must be a relative path inside the server's template directory", ref)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, nil, "", Errorf(CodeInternal, "template directory: %v", err)
	}
	defer root.Close()
	raw, err := root.ReadFile(file)
	if err != nil {
		return nil, nil, "", Errorf(CodeNotFound, "template %q: %v", ref, err)
	}
	// The whole workflow must be valid before one step is taken from it.
	path := filepath.Join(dir, file)
	w, err := workflow.Parse(path, raw)
	if err != nil {
		return nil, nil, "", Errorf(CodeBadRequest, "template %q: %v", ref, err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return nil, nil, "", Errorf(CodeBadRequest, "template %q: %v", ref, err)
	}
	var step map[string]any
	var found *workflow.Step
	for i := range w.Steps {
		if w.Steps[i].Name == name {
			found = &w.Steps[i]
		}
	}
	steps, _ := doc["steps"].([]any)
	for _, s := range steps {
		if m, ok := s.(map[string]any); ok && m["name"] == name {
			step = m
		}
	}
	if found == nil || step == nil {
		var names []string
		for _, s := range w.Steps {
			names = append(names, s.Name)
		}
		return nil, nil, "", Errorf(CodeNotFound, "template %q: no step %q in %s (its steps: %s)", ref, name, file, strings.Join(names, ", "))
	}
	if ins, ok := doc["inputs"].(map[string]any); ok {
		keep := map[string]any{}
		for _, in := range found.Inputs {
			if v, ok := ins[in]; ok {
				keep[in] = v
			}
		}
		doc["inputs"] = keep
	}
	return doc, step, path, nil
}
