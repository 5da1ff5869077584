package nixgen

import (
	"errors"
	"fmt"
	"strings"
)

// String returns s as a Nix double-quoted string literal that evaluates to
// exactly the bytes of s. It escapes `\`, `"`, the interpolation opener `${`
// and the newline, carriage return and tab characters. Nix has no escape for
// other control characters; they are valid inside a literal as they are and
// are written unchanged. A NUL byte cannot be held by a Nix string at all:
// callers check user strings with CheckString first (Generate does).
//
// Every user-provided string that reaches generated Nix goes through String;
// templates never print a user string themselves.
func String(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case '\\':
			b.WriteString(`\\`)
		case '"':
			b.WriteString(`\"`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '$':
			if i+1 < len(s) && s[i+1] == '{' {
				b.WriteString(`\$`)
			} else {
				b.WriteByte('$')
			}
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// errNUL is why CheckString refuses a string.
var errNUL = errors.New("contains a NUL byte, which a Nix string cannot hold")

// CheckString reports whether s can be written as a Nix string; what names
// the value in the error.
func CheckString(what, s string) error {
	if strings.IndexByte(s, 0) >= 0 {
		return fmt.Errorf("%s %q: %w", what, s, errNUL)
	}
	return nil
}

// attrPath renders a dotted nixpkgs attribute path ("python3Packages.numpy")
// below base as a selection with every segment quoted:
// base."python3Packages"."numpy".
func attrPath(base, path string) (string, error) {
	if err := CheckString("package", path); err != nil {
		return "", err
	}
	segs := strings.Split(path, ".")
	var b strings.Builder
	b.WriteString(base)
	for _, s := range segs {
		if s == "" {
			return "", fmt.Errorf("package %q: empty attribute name in path; write it as name.name", path)
		}
		b.WriteByte('.')
		b.WriteString(String(s))
	}
	return b.String(), nil
}
