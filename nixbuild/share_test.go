package nixbuild

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// A real ed25519 public key in Nix's spelling (32 zero bytes).
const zeroKey = "test-1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="

func TestSharingCheck(t *testing.T) {
	key := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(key, []byte("test-1:secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	good := []Sharing{
		{},
		{Substituters: []string{"https://cache.example", "http://127.0.0.1:8080/c", "file:///srv/c", "s3://bucket?region=x"}, TrustedPublicKeys: []string{zeroKey}},
		{Builders: "ssh://b x86_64-linux; ssh://c aarch64-linux", MaxJobs: "0"},
		{MaxJobs: "auto"},
		{Push: "file:///srv/cache", SigningKeyFile: key},
	}
	for _, s := range good {
		if err := s.Check(); err != nil {
			t.Errorf("%+v: %v", s, err)
		}
	}
	for _, tc := range []struct {
		s    Sharing
		want string
	}{
		{Sharing{Substituters: []string{"cache.example"}}, "want a URL of scheme"},
		{Sharing{Substituters: []string{"ftp://x"}}, "want a URL of scheme"},
		{Sharing{Substituters: []string{"https://a b"}}, ""},
		{Sharing{TrustedPublicKeys: []string{"nocolon"}}, "want NAME:BASE64"},
		{Sharing{TrustedPublicKeys: []string{"k:AAAA"}}, "32-byte ed25519 key"},
		{Sharing{TrustedPublicKeys: []string{"k:!!"}}, "32-byte ed25519 key"},
		{Sharing{Builders: "a\nb"}, "one line"},
		{Sharing{MaxJobs: "-1"}, "a number of jobs"},
		{Sharing{Push: "file:///srv/cache"}, "give the secret key"},
		{Sharing{SigningKeyFile: key}, "without a cache"},
		{Sharing{Push: "/srv/cache", SigningKeyFile: key}, "want a URL of scheme"},
		{Sharing{Push: "file:///srv/cache", SigningKeyFile: key + ".missing"}, "signing key"},
	} {
		err := tc.s.Check()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want an error with %q", tc.s, err, tc.want)
		}
	}
}

func TestPushArgs(t *testing.T) {
	got := signArgs("/tmp/a", "/k", []string{"/nix/store/x"})
	want := []string{"nix", "--extra-experimental-features", "nix-command flakes", "store", "sign", "--store", "/tmp/a", "--key-file", "/k", "--recursive", "/nix/store/x"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("sign:\n got %q\nwant %q", got, want)
	}
	got = copyArgs("", "file:///c", []string{"/nix/store/x", "/nix/store/y"})
	want = []string{"nix", "--extra-experimental-features", "nix-command flakes", "copy", "--to", "file:///c", "/nix/store/x", "/nix/store/y"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("copy:\n got %q\nwant %q", got, want)
	}
}
