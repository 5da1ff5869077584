package nixbuild

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Version is a Nix release number, as `nix --version` prints it.
type Version struct{ Major, Minor, Patch int }

// ParseVersion reads a Nix version from `nix --version` output or a bare
// number: "nix (Nix) 2.26.3", "2.18", "nix (Nix) 2.31.0pre20250712_e09e9d5",
// "nix (Determinate Nix 3.8.2) 2.30.1". The Nix version is the last word
// that starts with a digit.
func ParseVersion(s string) (Version, error) {
	fields := strings.Fields(s)
	for i := len(fields) - 1; i >= 0; i-- {
		f := fields[i]
		if f == "" || f[0] < '0' || f[0] > '9' {
			continue
		}
		var v Version
		parts := strings.SplitN(f, ".", 3)
		nums := []*int{&v.Major, &v.Minor, &v.Patch}
		for j, p := range parts {
			end := 0
			for end < len(p) && p[end] >= '0' && p[end] <= '9' {
				end++
			}
			n, err := strconv.Atoi(p[:end])
			if err != nil {
				return Version{}, fmt.Errorf("parse Nix version %q: %q is not a number", s, p)
			}
			*nums[j] = n
			if end < len(p) {
				break // a pre-release or build suffix ends the number
			}
		}
		return v, nil
	}
	return Version{}, fmt.Errorf("parse Nix version %q: no version number in it", s)
}

// Less says whether v is an older release than o.
func (v Version) Less(o Version) bool {
	if v.Major != o.Major {
		return v.Major < o.Major
	}
	if v.Minor != o.Minor {
		return v.Minor < o.Minor
	}
	return v.Patch < o.Patch
}

func (v Version) String() string { return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch) }

// ErrNixTooOld marks a Nix older than what is to be evaluated needs; the
// error is a *TooOldError.
var ErrNixTooOld = errors.New("nix is too old")

// HowToGetNix says where a Nix recent enough for today's nixpkgs comes from.
const HowToGetNix = "on Debian 12, scripts/install-nix.sh from agentsandbox's source puts Debian 13's Nix 2.26 " +
	"in a private prefix without touching the host's libraries (its setup runs it); " +
	"on Debian 13 or later, apt-get install nix-bin; elsewhere, the installer at https://nixos.org/download"

// TooOldError is a Nix older than a flake needs, found before it evaluates
// anything.
type TooOldError struct {
	Found string // `nix --version` as printed, such as "nix (Nix) 2.8.0"
	Path  string // the nix binary
	Need  string // the oldest version that works, such as "2.18"
	Why   string // what needs it
}

func (e *TooOldError) Error() string {
	return fmt.Sprintf("%s at %s is too old for this workflow, which needs Nix %s or later: %s. Get a newer Nix: %s",
		e.Found, e.Path, e.Need, e.Why, HowToGetNix)
}

func (e *TooOldError) Is(target error) bool { return target == ErrNixTooOld }

// CheckVersion says whether found (`nix --version` of the nix at path)
// is at least need; why names what needs it. A version it cannot read is
// taken to be new enough: Nix itself then says what it cannot do.
func CheckVersion(found, path, need, why string) error {
	have, err := ParseVersion(found)
	if err != nil {
		return nil
	}
	min, err := ParseVersion(need)
	if err != nil {
		return fmt.Errorf("check the Nix version: %w", err)
	}
	if have.Less(min) {
		return &TooOldError{Found: strings.TrimSpace(found), Path: path, Need: need, Why: why}
	}
	return nil
}
