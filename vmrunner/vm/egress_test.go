package vm

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/agentsandbox/agentsandbox/netns"
	"github.com/agentsandbox/agentsandbox/vmrunner"
	"github.com/agentsandbox/agentsandbox/workflow"
)

// fakeRoom is a step's namespace that writes down, as text, what it was
// asked (through the egress and the shaper).
type fakeRoom struct {
	log      *strings.Builder
	shapeErr error
}

func (r fakeRoom) SetupEgress(e netns.Egress) error { return nil }
func (r fakeRoom) Listen(network, address string) (net.Listener, error) {
	return nil, errors.New("fake")
}
func (r fakeRoom) ListenPacket(network, address string) (net.PacketConn, error) {
	return nil, errors.New("fake")
}
func (r fakeRoom) EgressCounters() (netns.EgressCounters, error) { return netns.EgressCounters{}, nil }
func (r fakeRoom) SetBandwidth(link string, bps uint64) error {
	fmt.Fprintf(r.log, "tbf %s %d\n", link, bps)
	return r.shapeErr
}

// fakeEgress writes down Start and Stop.
type fakeEgress struct{ log *strings.Builder }

func (e fakeEgress) Start(room netns.EgressRoom, tap string) error {
	fmt.Fprintf(e.log, "start %q\n", tap)
	return nil
}

func (e fakeEgress) Stop() error {
	e.log.WriteString("stop\n")
	return nil
}

// TestStartEgress: the egress starts on the runner's one tap, which is
// then shaped to the step's bandwidth; a runner with no tap or several is
// refused before anything starts, saying what to rebuild; a tap that
// cannot be shaped stops the egress again.
func TestStartEgress(t *testing.T) {
	for _, tc := range []struct {
		name      string
		taps      []string
		bandwidth int64
		shapeErr  error
		want      string // what was asked
		wantErr   string
	}{
		{name: "shaped", taps: []string{"asb-tap0"}, bandwidth: 8_000_000, want: "start \"asb-tap0\"\ntbf asb-tap0 8000000\n"},
		{name: "no bandwidth", taps: []string{"asb-tap0"}, want: "start \"asb-tap0\"\n"},
		{name: "no tap", wantErr: "has no tap interface"},
		{name: "two taps", taps: []string{"a", "b"}, wantErr: "egress serves exactly one"},
		{name: "shaping fails", taps: []string{"asb-tap0"}, bandwidth: 8_000_000, shapeErr: errors.New("no tbf"),
			want: "start \"asb-tap0\"\ntbf asb-tap0 8000000\nstop\n", wantErr: "no tbf"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var log strings.Builder
			spec := vmrunner.StepSpec{
				Runner: "/nix/store/x-runner",
				Step:   workflow.Step{Name: "fetch", Resources: workflow.Resources{Bandwidth: tc.bandwidth}},
				Egress: fakeEgress{&log},
			}
			err := startEgress(fakeRoom{log: &log, shapeErr: tc.shapeErr}, spec, RunnerInfo{Taps: tc.taps})
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
			if err != nil && len(tc.taps) != 1 && !strings.Contains(err.Error(), "rebuild the step's runner") {
				t.Errorf("err = %v: it does not say what to do", err)
			}
			if log.String() != tc.want {
				t.Errorf("asked:\n%s\nwant:\n%s", log.String(), tc.want)
			}
		})
	}
}
