package s3store

import (
	"strings"
	"testing"
)

func env(name string) string {
	return map[string]string{"AWS_ACCESS_KEY_ID": "id", "AWS_SECRET_ACCESS_KEY": "secret", "AWS_REGION": "eu-west-1"}[name]
}

func TestParseURL(t *testing.T) {
	c, err := ParseURL("s3://bkt/team/records/?endpoint=127.0.0.1:9000&insecure=1", env)
	if err != nil {
		t.Fatal(err)
	}
	want := Config{Bucket: "bkt", Prefix: "team/records", Endpoint: "127.0.0.1:9000", Region: "eu-west-1", Insecure: true, AccessKey: "id", SecretKey: "secret"}
	if c != want {
		t.Fatalf("ParseURL = %+v\nwant %+v", c, want)
	}
	if got := c.URL(); got != "s3://bkt/team/records?endpoint=127.0.0.1:9000&insecure=1" || strings.Contains(got, "secret") {
		t.Fatalf("URL() = %q", got)
	}
	c, err = ParseURL("s3://bkt?region=us-west-2", env)
	if err != nil || c.Endpoint != defaultEndpoint || c.Region != "us-west-2" || c.Prefix != "" || c.Insecure {
		t.Fatalf("ParseURL without endpoint = %+v, %v", c, err)
	}
}

func TestParseURLRefuses(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
		{"http://bkt/p", "want s3://"},
		{"s3:///p", "want s3://"},
		{"s3://u:p@bkt/p", "no user"},
		{"s3://bkt/a/../b", "not a clean path"},
		{"s3://bkt/p?endpoint=nohostport", "want HOST:PORT"},
		{"s3://bkt/p?insecure=yes", "want 1 or 0"},
		{"s3://bkt/p?secret=x", `unknown parameter "secret"`},
		{"s3://bkt/p?region=a&region=b", "given 2 times"},
	} {
		if _, err := ParseURL(tc.url, env); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseURL(%q) = %v; want an error containing %q", tc.url, err, tc.want)
		}
	}
	if _, err := ParseURL("s3://bkt/p", func(string) string { return "" }); err == nil || !strings.Contains(err.Error(), "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY") {
		t.Errorf("no credentials: %v", err)
	}
}
