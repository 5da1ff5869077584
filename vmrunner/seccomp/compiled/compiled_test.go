package compiled

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// A program survives its JSON encoding exactly, and what is not a whole
// number of instructions, or not base64, is refused.
func TestProgramJSON(t *testing.T) {
	p := Program{
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: 4},
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, Jt: 1, Jf: 0, K: 0xc000003e},
		{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_KILL_PROCESS},
		{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ALLOW},
	}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var back Program
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(back, p) {
		t.Fatalf("round trip: %v, want %v", back, p)
	}
	for _, bad := range []string{`"AAAA"`, `"not base64!"`, `17`, `{"a":1}`} {
		if err := json.Unmarshal([]byte(bad), &back); err == nil {
			t.Errorf("%s decoded as a program: %v", bad, back)
		}
	}
	var empty Program
	if err := json.Unmarshal([]byte(`""`), &empty); err != nil || len(empty) != 0 {
		t.Errorf("the empty program: %v %v", empty, err)
	}
}

// Load refuses an empty or oversized program before touching the process.
func TestLoadRefusesBadLengths(t *testing.T) {
	for _, p := range []Program{nil, make(Program, unix.BPF_MAXINSNS+1)} {
		if err := p.Load(); err == nil || !strings.Contains(err.Error(), "instructions") {
			t.Errorf("Load of %d instructions: %v", len(p), err)
		}
	}
}
