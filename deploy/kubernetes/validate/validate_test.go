package validate

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

const ns = "agentsandbox"

func validator(t *testing.T) *Validator {
	t.Helper()
	v, err := New("testdata/crds")
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// build runs kustomize on deploy/kubernetes/DIR, with the two secret files
// an operator writes, and returns the documents it makes.
func build(t *testing.T, dir string) [][]byte {
	t.Helper()
	mem := filesys.MakeFsInMemory()
	err := filepath.WalkDir("..", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel("..", p)
		if d.IsDir() {
			if rel == "validate" {
				return filepath.SkipDir
			}
			return mem.MkdirAll(filepath.Join("/k", rel))
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return mem.WriteFile(filepath.Join("/k", rel), b)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := mem.WriteFile("/k/base/token", []byte("0123456789abcdef0123456789abcdef\n")); err != nil {
		t.Fatal(err)
	}
	env := "AGENTSANDBOX_STORE=s3://records/team?endpoint=s3.agentsandbox-store.svc:7070&insecure=1\nAWS_ACCESS_KEY_ID=k\nAWS_SECRET_ACCESS_KEY=s\n"
	if err := mem.WriteFile("/k/base/store.env", []byte(env)); err != nil {
		t.Fatal(err)
	}
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(mem, filepath.Join("/k", dir))
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	out, err := m.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	docs, err := Documents(out)
	if err != nil {
		t.Fatal(err)
	}
	return docs
}

type object struct {
	APIVersion string         `json:"apiVersion"`
	Kind       string         `json:"kind"`
	Metadata   map[string]any `json:"metadata"`
	Spec       map[string]any `json:"spec"`
}

func parse(t *testing.T, doc []byte) object {
	t.Helper()
	var o object
	if err := yaml.Unmarshal(doc, &o); err != nil {
		t.Fatal(err)
	}
	return o
}

// get walks a path of map keys and list indexes (as ints).
func get(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			l, _ := v.([]any)
			if k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

// TestManifests builds each kustomization and validates every object it
// makes, then checks that the objects name each other consistently.
func TestManifests(t *testing.T) {
	v := validator(t)
	for _, dir := range []string{"base", "overlays/vm-kvm", "overlays/kata"} {
		t.Run(dir, func(t *testing.T) {
			docs := build(t, dir)
			kinds := map[string]object{}
			for _, d := range docs {
				if err := v.Validate(d, ns); err != nil {
					t.Errorf("refused: %v", err)
				}
				o := parse(t, d)
				kinds[o.Kind+"/"+o.Metadata["name"].(string)] = o
			}
			for _, want := range []string{"Namespace/agentsandbox", "SandboxTemplate/agentsandbox-serve", "SandboxWarmPool/agentsandbox-serve",
				"NetworkPolicy/agentsandbox-serve", "NetworkPolicy/agentsandbox-serve-proxy-egress", "Secret/agentsandbox-token", "Secret/agentsandbox-store"} {
				if _, ok := kinds[want]; !ok {
					t.Errorf("%s: no %s in the build", dir, want)
				}
			}
			tmpl := kinds["SandboxTemplate/agentsandbox-serve"]
			pod := get(tmpl.Spec, "podTemplate", "spec")
			labels := get(tmpl.Spec, "podTemplate", "metadata", "labels").(map[string]any)
			for _, np := range []string{"agentsandbox-serve", "agentsandbox-serve-proxy-egress"} {
				sel := get(kinds["NetworkPolicy/"+np].Spec, "podSelector", "matchLabels").(map[string]any)
				for k, val := range sel {
					if labels[k] != val {
						t.Errorf("NetworkPolicy %s selects %s=%v, the template's pods are labelled %v", np, k, val, labels)
					}
				}
			}
			if got := get(kinds["SandboxWarmPool/agentsandbox-serve"].Spec, "sandboxTemplateRef", "name"); got != "agentsandbox-serve" {
				t.Errorf("warm pool names template %v", got)
			}
			for _, ref := range []any{get(pod, "volumes", 0, "secret", "secretName"), get(pod, "containers", 0, "envFrom", 0, "secretRef", "name")} {
				if _, ok := kinds["Secret/"+ref.(string)]; !ok {
					t.Errorf("the template names Secret %v, which the build does not make", ref)
				}
			}
			port := get(pod, "containers", 0, "ports", 0, "containerPort")
			if get(kinds["NetworkPolicy/agentsandbox-serve"].Spec, "ingress", 0, "ports", 0, "port") != port {
				t.Errorf("ingress port is not serve's %v", port)
			}
			args := get(pod, "containers", 0, "args", 0).(string)
			for _, a := range []string{"--listen 0.0.0.0:8888", "--token-file /run/secrets/agentsandbox/token", `--store "$AGENTSANDBOX_STORE"`} {
				if !strings.Contains(args, a) {
					t.Errorf("serve is not started with %s", a)
				}
			}
			limits := get(pod, "containers", 0, "resources", "limits").(map[string]any)
			switch dir {
			case "overlays/vm-kvm":
				if limits["devices.kubevirt.io/kvm"] != "1" {
					t.Errorf("vm-kvm: no devices.kubevirt.io/kvm limit: %v", limits)
				}
			case "overlays/kata":
				if get(pod, "runtimeClassName") != "kata" {
					t.Errorf("kata: runtimeClassName %v", get(pod, "runtimeClassName"))
				}
			default:
				if _, ok := limits["devices.kubevirt.io/kvm"]; ok || get(pod, "runtimeClassName") != nil {
					t.Errorf("base asks for KVM or a runtime class")
				}
			}
		})
	}
}

// TestClaimExample validates examples/claim.yaml against the warm pool.
func TestClaimExample(t *testing.T) {
	v := validator(t)
	b, err := os.ReadFile("../examples/claim.yaml")
	if err != nil {
		t.Fatal(err)
	}
	docs, err := Documents(b)
	if err != nil || len(docs) != 1 {
		t.Fatalf("claim.yaml: %d documents, %v", len(docs), err)
	}
	if err := v.Validate(docs[0], ns); err != nil {
		t.Fatal(err)
	}
	if got := get(parse(t, docs[0]).Spec, "warmPoolRef", "name"); got != "agentsandbox-serve" {
		t.Errorf("the claim names warm pool %v", got)
	}
}

// TestRefused: each manifest in testdata/bad is refused by the same
// validation, with an error naming what its first line says.
func TestRefused(t *testing.T) {
	v := validator(t)
	files, _ := filepath.Glob("testdata/bad/*.yaml")
	if len(files) < 8 {
		t.Fatalf("only %d bad manifests", len(files))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			first, _, _ := strings.Cut(string(b), "\n")
			want, ok := strings.CutPrefix(first, "# want: ")
			if !ok {
				t.Fatalf("first line is not '# want: TEXT': %q", first)
			}
			docs, err := Documents(b)
			if err != nil {
				t.Fatal(err)
			}
			err = v.Validate(docs[0], ns)
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), want) {
				t.Errorf("refused, but not for %q: %v", want, err)
			}
			t.Logf("refused: %v", err)
		})
	}
}
