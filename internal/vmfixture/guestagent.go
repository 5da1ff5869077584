package vmfixture

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// GuestAgentPackage is the guest agent's import path.
const GuestAgentPackage = "github.com/agentsandbox/agentsandbox/cmd/agentsandbox-guest"

// GuestBuildCmd builds the static guest agent into out.
func GuestBuildCmd(out string) []string {
	return []string{"go", "build", "-trimpath", "-o", out, GuestAgentPackage}
}

// BuildGuestAgent builds the static agentsandbox-guest (CGO_ENABLED=0)
// into dir and returns its bytes, for the initramfs's /init. It runs in the
// module of the calling test, so it needs the go command.
func BuildGuestAgent(ctx context.Context, dir string) ([]byte, error) {
	out := filepath.Join(dir, "agentsandbox-guest")
	argv := GuestBuildCmd(out)
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("build guest agent: CGO_ENABLED=0 %s: %w: %s", strings.Join(argv, " "), err, strings.TrimSpace(stderr.String()))
	}
	return os.ReadFile(out)
}

// TSCParam returns tsc_early_khz=<host TSC kHz> for the guest's command
// line. Under TCG the guest's TSC runs at the host's rate, and when the
// host is busy the kernel's PIT calibration fails: it then marks the TSC
// unstable and, on -M microvm, waits forever for a clock. Telling it the
// frequency skips that calibration. Empty when /proc/cpuinfo has no MHz.
func TSCParam() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || strings.TrimSpace(k) != "cpu MHz" {
			continue
		}
		mhz, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || mhz <= 0 {
			return ""
		}
		return "tsc_early_khz=" + strconv.Itoa(int(mhz*1000))
	}
	return ""
}
