package main

import (
	"encoding/json"
	"testing"

	"github.com/agentsandbox/agentsandbox/workflow"
)

func TestSchemaCommand(t *testing.T) {
	code, stdout, stderr := run(t, "schema")
	if code != ExitOK || stderr != "" {
		t.Fatalf("exit %d stderr %q", code, stderr)
	}
	if stdout != string(workflow.Schema()) {
		t.Error("schema output differs from workflow.Schema()")
	}
	var v map[string]any
	if err := json.Unmarshal([]byte(stdout), &v); err != nil || v["$schema"] != "https://json-schema.org/draft/2020-12/schema" {
		t.Errorf("not a 2020-12 schema: %v", err)
	}
	if code, _, _ := run(t, "schema", "extra"); code != ExitInvalid {
		t.Errorf("extra argument: exit %d, want %d", code, ExitInvalid)
	}
}
