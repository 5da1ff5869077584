package policy

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// HostCeilingFields are the resources data.agentsandbox.host_ceilings
// may cap relative to the host (input.host.capacity).
var HostCeilingFields = []string{"disk", "memory", "vcpu"}

// checkHostCeilings reads data.agentsandbox.host_ceilings strictly, so
// that a value the rule would not take ("50%", a typo of a key) is a
// SourceError at load instead of a ceiling silently off: each key one of
// HostCeilingFields, each value a number of 0 or more, or null or false
// (off).
func checkHostCeilings(data map[string]any) error {
	const key = "data.agentsandbox.host_ceilings"
	as, _ := data["agentsandbox"].(map[string]any)
	v, ok := as["host_ceilings"]
	if !ok || v == nil {
		return nil
	}
	bad := func(format string, a ...any) error {
		return &SourceError{Problems: []string{fmt.Sprintf("policy data "+key+format, a...)}}
	}
	m, ok := v.(map[string]any)
	if !ok {
		return bad(` is not an object: want one such as {"vcpu": 1, "memory": 0.5, "disk": null}`)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !slices.Contains(HostCeilingFields, k) {
			return bad(".%s: not a resource this ceiling takes; want %s", k, strings.Join(HostCeilingFields, ", "))
		}
		switch x := m[k].(type) { // numbers are json.Number (decodeData)
		case nil, bool:
			if x == true {
				return bad(".%s is true: want a multiple of the host's figure (1: no more than the host has), or null or false for none", k)
			}
		case json.Number:
			if f, err := x.Float64(); err != nil || f < 0 {
				return bad(".%s is %s: want a multiple of the host's figure, 0 or more (1: no more than the host has)", k, x)
			}
		default:
			return bad(".%s is %v (%T): want a multiple of the host's figure, such as 1 or 0.5, or null or false for none", k, x, x)
		}
	}
	return nil
}
