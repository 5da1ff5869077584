package nixgen

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"github.com/agentsandbox/agentsandbox/internal/testtier"
)

// hostile are strings that try to break out of a Nix string literal.
var hostile = []string{
	"",
	"plain",
	`${builtins.abort "x"}`,
	`"; evil = 1; "`,
	`\`,
	`\\`,
	`\${x}`,
	`$${x}`,
	`$`,
	`x$`,
	`$\`,
	`''`,
	`''${x}`,
	"line1\nline2\r\n\tindented",
	"ctrl \x01\x07\x1b[31m\x7f",
	"ünïcødé ✓ 日本",
	"\xff\xfe invalid utf-8",
	`${`,
	`{}`,
	"#comment\n${toString 1}",
	`" + builtins.readFile /etc/passwd + "`,
}

func TestStringTable(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{``, `""`},
		{`a`, `"a"`},
		{`${x}`, `"\${x}"`},
		{`$x`, `"$x"`},
		{`$`, `"$"`},
		{`"`, `"\""`},
		{`\`, `"\\"`},
		{"a\nb\rc\td", `"a\nb\rc\td"`},
		{`''`, `"''"`},
		{`$${`, `"$\${"`},
	} {
		if got := String(c.in); got != c.want {
			t.Errorf("String(%q) = %s, want %s", c.in, got, c.want)
		}
	}
}

func TestCheckStringRejectsNUL(t *testing.T) {
	if err := CheckString("env value", "a\x00b"); err == nil {
		t.Fatal("CheckString accepted a NUL byte")
	}
	for _, s := range hostile {
		if err := CheckString("value", s); err != nil {
			t.Errorf("CheckString(%q): %v", s, err)
		}
	}
}

// TestStringRoundTripsThroughNix evaluates every escaped hostile string with
// real Nix and checks it hashes to the original bytes: nothing is
// interpolated, nothing lost.
func TestStringRoundTripsThroughNix(t *testing.T) {
	testtier.Nix(t)
	var expr strings.Builder
	expr.WriteString("[\n")
	for _, s := range hostile {
		expr.WriteString("  (builtins.hashString \"sha256\" " + String(s) + ")\n")
	}
	expr.WriteString("]\n")
	out, err := exec.Command("nix-instantiate", "--eval", "--strict", "--json", "-E", expr.String()).CombinedOutput()
	if err != nil {
		t.Fatalf("nix-instantiate --eval: %v\n%s\nexpression:\n%s", err, out, expr.String())
	}
	var got []string
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("decode %s: %v", out, err)
	}
	if len(got) != len(hostile) {
		t.Fatalf("got %d hashes for %d strings", len(got), len(hostile))
	}
	for i, s := range hostile {
		sum := sha256.Sum256([]byte(s))
		if want := hex.EncodeToString(sum[:]); got[i] != want {
			t.Errorf("String(%q) = %s evaluates to other bytes (sha256 %s, want %s)", s, String(s), got[i], want)
		}
	}
}
