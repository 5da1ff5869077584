package sandboxes

import (
	"context"
	"testing"
)

func TestIdentityOwns(t *testing.T) {
	a, admin := Identity{Name: "a"}, Identity{Name: "ops", Admin: true}
	for _, c := range []struct {
		id    Identity
		owner string
		want  bool
	}{
		{a, "a", true}, {a, "b", false}, {a, "", false},
		{Identity{}, "", false}, // no name owns nothing, not even the ownerless
		{admin, "a", true}, {admin, "", true}, {Operator, "a", true},
	} {
		if got := c.id.Owns(c.owner); got != c.want {
			t.Errorf("%+v owns %q: %v, want %v", c.id, c.owner, got, c.want)
		}
	}
	if got := caller(context.Background()); got != Operator {
		t.Errorf("the caller of a context without one: %+v", got)
	}
	if got := caller(WithIdentity(context.Background(), a)); got != a {
		t.Errorf("the caller: %+v", got)
	}
	for name, ok := range map[string]bool{"a": true, "ci-bot-7": true, "uid-0": true, "": false, "-a": false, "a-": false, "A": false, "a_b": false, "a.b": false,
		"abcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghij123": true, "abcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghij1234": false} {
		if err := ValidIdentityName(name); (err == nil) != ok {
			t.Errorf("ValidIdentityName(%q): %v", name, err)
		}
	}
}
