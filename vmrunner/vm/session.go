// session.go holds a session job's channel: the runner check, the dial
// of qemu's virtio-serial socket beneath the VM's working directory, the
// agent's ping.

package vm

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/agentsandbox/agentsandbox/guest"
	"github.com/agentsandbox/agentsandbox/guest/mux"
	"github.com/agentsandbox/agentsandbox/microvm"
	"github.com/agentsandbox/agentsandbox/vmrunner"
	"github.com/agentsandbox/agentsandbox/workflow"
	"golang.org/x/sys/unix"
)

// pingTimeout bounds one ping of the agent once the VM is up.
const pingTimeout = 10 * time.Second

// checkSessionRunner refuses a runner without the session channel: one
// not built for qemu, or built before nixgen added the channel.
func checkSessionRunner(runner string) error {
	ri, err := ReadRunner(runner)
	if err != nil {
		return err
	}
	if ri.Hypervisor != string(workflow.HypervisorQEMU) {
		return fmt.Errorf("runner %s uses hypervisor %q, which has no virtio-serial port for the session channel: a VM sandbox needs hypervisor qemu (vsock on the other hypervisors is future work)", runner, ri.Hypervisor)
	}
	if !ri.HasSessionPort {
		return fmt.Errorf("runner %s has no session channel (no virtserialport named %s): it was built before VM sandboxes; render and realise the step's runner again", runner, guest.SessionPort)
	}
	return nil
}

// connect dials the session channel until qemu listens, then pings the
// agent until it answers, the VM ends, ctx is done or bound passes.
func (s *Sandbox) connect(ctx context.Context, bound time.Duration) error {
	deadline := time.Now().Add(bound)
	pause := 5 * time.Millisecond
	var last error
	for {
		if s.mux == nil {
			c, err := dialSession(s.l.r.workDir, s.hvUID)
			if err == nil {
				s.mux = mux.Client(c)
			}
			last = err
		}
		if s.mux != nil {
			last = s.ping(ctx, time.Until(deadline))
			if last == nil {
				return nil
			}
			select {
			case <-s.mux.Done():
				// qemu closed the channel: the VM is ending.
				return s.startError(fmt.Sprintf("the session channel closed before the agent answered (%v)", last))
			default:
			}
		}
		select {
		case <-s.Done():
			return s.startError(fmt.Sprintf("the hypervisor ended before the agent answered on the session channel (%v)", last))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pause):
		}
		if time.Now().After(deadline) {
			return s.startError(fmt.Sprintf("the agent did not answer on the session channel within %v (%v), and the host stopped the VM", bound, last))
		}
		pause = min(2*pause, 50*time.Millisecond)
	}
}

func (s *Sandbox) startError(what string) error {
	return &StartError{Accel: accelOf(s.res), What: what, ConsoleTail: s.l.con.tail()}
}

// dialSession connects to the session channel's socket beneath the VM's
// working directory (root's VM directory holds it; it is the
// hypervisor's) without following a symlink there, and checks that the
// hypervisor's uid listens on it.
func dialSession(workDir string, hvUID int) (net.Conn, error) {
	fd, err := unix.Open(workDir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open the VM working directory %s: %w", workDir, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstatat(fd, microvm.SessionSocket, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil, fmt.Errorf("find the session channel %s in %s: %w", microvm.SessionSocket, workDir, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return nil, fmt.Errorf("%s in %s is not a socket (mode %o): refusing it", microvm.SessionSocket, workDir, st.Mode)
	}
	path := "/proc/self/fd/" + strconv.Itoa(fd) + "/" + microvm.SessionSocket
	c, cred, err := vmrunner.DialPeer(path)
	if err != nil {
		return nil, fmt.Errorf("connect to the session channel in %s: %w", workDir, err)
	}
	if int(cred.Uid) != hvUID {
		c.Close()
		return nil, fmt.Errorf("the session channel in %s is served by uid %d, not the hypervisor's %d: refusing it", workDir, cred.Uid, hvUID)
	}
	return c, nil
}

// ping asks the agent for a pong on a stream of its own.
func (s *Sandbox) ping(ctx context.Context, wait time.Duration) error {
	st, err := s.mux.Open(ctx)
	if err != nil {
		return fmt.Errorf("ping the agent: %w", err)
	}
	defer st.Close()
	t := time.AfterFunc(min(wait, pingTimeout), func() { st.Close() })
	defer t.Stop()
	if err := guest.NewSessionEncoder(st).Encode(guest.SessionRequest{Op: guest.OpPing}); err != nil {
		return fmt.Errorf("ping the agent: %w", err)
	}
	var ev guest.SessionEvent
	if err := guest.NewSessionDecoder(st).Decode(&ev); err != nil {
		return fmt.Errorf("ping the agent: %w", err)
	}
	if ev.Type != guest.EventPong {
		return fmt.Errorf("ping the agent: answered %q (%s)", ev.Type, ev.Error)
	}
	return nil
}
