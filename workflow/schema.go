package workflow

import _ "embed"

//go:embed schema.json
var schemaJSON []byte

// Schema returns a JSON Schema (draft 2020-12) of the workflow YAML format,
// for editors such as yaml-language-server. It checks shape only; Parse
// also checks references, the DAG and pins.
func Schema() []byte {
	return append([]byte(nil), schemaJSON...)
}
