package jailwire

import (
	"strings"
	"testing"
)

// Check accepts our own hello and one without a build id, and says what
// differs otherwise.
func TestHelloCheck(t *testing.T) {
	our := OurHello()
	if err := our.Check(); err != nil {
		t.Fatalf("our own hello: %v", err)
	}
	noBuild := our
	noBuild.Build = ""
	if err := noBuild.Check(); err != nil {
		t.Errorf("a hello without a build id: %v", err)
	}
	for name, c := range map[string]struct {
		h    Hello
		want string
	}{
		"protocol": {Hello{Protocol: our.Protocol + 1, Job: our.Job}, "jail protocol"},
		"job":      {Hello{Protocol: our.Protocol, Job: our.Job + 1}, "job protocol"},
	} {
		if err := c.h.Check(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}
	if our.Build != "" { // a clean VCS build: another build is refused
		other := our
		other.Build = "0000000"
		if err := other.Check(); err == nil || !strings.Contains(err.Error(), "built from 0000000") {
			t.Errorf("another build: %v", err)
		}
	}
}

// WithDefaults fills in the descriptor limits and keeps soft <= hard.
func TestRlimitsWithDefaults(t *testing.T) {
	for _, c := range []struct{ in, want Rlimits }{
		{Rlimits{}, Rlimits{NoFileSoft: DefaultNoFileSoft, NoFileHard: DefaultNoFileHard}},
		{Rlimits{NoFileSoft: 8192}, Rlimits{NoFileSoft: 8192, NoFileHard: 8192}},
		{Rlimits{NoFileHard: 100}, Rlimits{NoFileSoft: 100, NoFileHard: 100}},
		{Rlimits{NoFileSoft: 500, NoFileHard: 200, FSize: 7}, Rlimits{NoFileSoft: 200, NoFileHard: 200, FSize: 7}},
	} {
		if got := c.in.WithDefaults(); got != c.want {
			t.Errorf("%+v.WithDefaults() = %+v, want %+v", c.in, got, c.want)
		}
	}
}
