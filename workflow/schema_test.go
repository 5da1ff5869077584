package workflow

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.yaml.in/yaml/v3"
)

func compileSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(Schema()))
	if err != nil {
		t.Fatalf("schema is not JSON: %v", err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("workflow.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("workflow.json")
	if err != nil {
		t.Fatalf("compile schema: %v", err)
	}
	return s
}

// yamlToJSONValue reads a YAML file as the JSON value an editor validates.
func yamlToJSONValue(t *testing.T, file string) any {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := yaml.Unmarshal(data, &v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	j, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	out, err := jsonschema.UnmarshalJSON(bytes.NewReader(j))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestSchemaAcceptsExamples(t *testing.T) {
	s := compileSchema(t)
	files, _ := filepath.Glob("../examples/*.yaml")
	if len(files) == 0 {
		t.Fatal("no examples")
	}
	for _, f := range files {
		if err := s.Validate(yamlToJSONValue(t, f)); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

func TestSchemaRejectsBadShapes(t *testing.T) {
	s := compileSchema(t)
	for _, f := range []string{"unknown-keys", "wrong-types", "units", "io-rates", "disk-inodes", "names", "enums", "header", "missing-header", "paths", "nixpkgs-branch", "deterministic"} {
		if err := s.Validate(yamlToJSONValue(t, "testdata/bad/"+f+".yaml")); err == nil {
			t.Errorf("schema accepts testdata/bad/%s.yaml", f)
		}
	}
}

// TestSchemaKeysMatchParser keeps the schema's property names and the
// parser's key tables the same.
func TestSchemaKeysMatchParser(t *testing.T) {
	var sch struct {
		Properties map[string]any `json:"properties"`
		Defs       map[string]struct {
			Properties map[string]any `json:"properties"`
		} `json:"$defs"`
	}
	if err := json.Unmarshal(Schema(), &sch); err != nil {
		t.Fatal(err)
	}
	var nix struct {
		OneOf []struct {
			Properties map[string]any `json:"properties"`
		} `json:"oneOf"`
	}
	b, _ := json.Marshal(sch.Properties["nixpkgs"])
	json.Unmarshal(b, &nix)
	var defaults struct {
		Properties map[string]any `json:"properties"`
	}
	b, _ = json.Marshal(sch.Properties["defaults"])
	json.Unmarshal(b, &defaults)
	check := func(what string, props map[string]any, keys []string) {
		got := make([]string, 0, len(props))
		for k := range props {
			got = append(got, k)
		}
		want := append([]string{}, keys...)
		sort.Strings(got)
		sort.Strings(want)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: schema has %v, parser knows %v", what, got, want)
		}
	}
	check("workflow", sch.Properties, workflowKeys)
	check("step", sch.Defs["step"].Properties, stepKeys)
	check("input", sch.Defs["input"].Properties, inputKeys)
	check("resources", sch.Defs["resources"].Properties, resourcesKeys)
	check("defaults", defaults.Properties, defaultsKeys)
	if len(nix.OneOf) == 2 {
		check("nixpkgs", nix.OneOf[1].Properties, nixpkgsKeys)
	} else {
		t.Error("nixpkgs schema is not oneOf[string, object]")
	}
}
