package jailinit

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestCloseInherited: the init's second line. A descriptor that came
// through exec without close-on-exec is closed unless kept; the kept one
// stays open, marked close-on-exec. It runs in a child (this test binary)
// given a stray descriptor 3 and a kept descriptor 4.
func TestCloseInherited(t *testing.T) {
	if os.Getenv("JAIL_TEST_CLOSE_INHERITED") == "1" {
		if err := closeInherited(4); err != nil {
			fmt.Println("error:", err)
			return
		}
		for fd := 3; fd <= 4; fd++ {
			flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
			fmt.Printf("fd%d open=%v cloexec=%v\n", fd, err == nil, err == nil && flags&unix.FD_CLOEXEC != 0)
		}
		return
	}
	stray, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer stray.Close()
	kept, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer kept.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCloseInherited$", "-test.v")
	cmd.Env = append(os.Environ(), "JAIL_TEST_CLOSE_INHERITED=1")
	cmd.ExtraFiles = []*os.File{stray, kept}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	for _, want := range []string{"fd3 open=false", "fd4 open=true cloexec=true"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("child lacks %q:\n%s", want, out)
		}
	}
}
