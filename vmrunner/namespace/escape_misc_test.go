package namespace

import (
	"strconv"
	"strings"
	"testing"

	"github.com/agentsandbox/agentsandbox/guest"
	"github.com/agentsandbox/agentsandbox/internal/runnertest"
	"github.com/agentsandbox/agentsandbox/vmrunner"
)

// Escape tests for the smaller classes of issue 11. Each failed before its
// fix. Memory a job holds outside its cgroup is tested here, against the
// namespace backend. The other two classes are stopped in the CLI, so
// their end-to-end tests run `apply` with a real jail in
// cmd/agentsandbox: TestApplyNeutralisesForgedLine (control characters
// from job output on the caller's terminal) and TestApplyRefusesOutsideInput
// (a file input read from outside the workflow's directory).

// tcpHog is a perl job that listens on loopback in the step's own network
// namespace, opens many connections to itself, accepts them and writes to
// each without ever reading, so the data sits in socket buffers: the
// sender's write queue and the receiver's receive queue. It prints how many
// bytes the kernel took, stopping well before the host-wide pool is
// exhausted. (Connections it never accepts are not charged to any cgroup
// by the kernel until accept: docs/isolation.md, "TCP buffers".)
const tcpHog = `
use strict; use IO::Socket::INET;
$| = 1;
my $l = IO::Socket::INET->new(Listen => 4096, LocalAddr => '127.0.0.1', LocalPort => 0, Proto => 'tcp') or die "listen: $!";
my $port = $l->sockport;
my $chunk = 'x' x 65536;
my ($total, $conns, @keep) = (0, 0);
# Stop at 160 MiB: past the 64 MiB limit is proof enough, and the
# kernel's TCP memory pool (tcp_mem) is shared with the host.
for my $i (1 .. 100) {
	last if $total > 160 << 20;
	my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port, Proto => 'tcp') or last;
	my $a = $l->accept or die "accept: $!";
	$s->blocking(0);
	$conns++;
	while (1) {
		my $n = syswrite($s, $chunk);
		last unless defined $n && $n > 0;
		$total += $n;
	}
	push @keep, $s, $a;
}
print "queued $total bytes over $conns connections\n";
`

// TestTCPBuffersCharged: TCP socket buffers count against the step's
// memory. On cgroup v1 the kernel charges them to the step's group only
// once memory.kmem.tcp.limit_in_bytes is written; before that a job queued
// 159 MiB with a 64 MiB limit. On v2 memory.max covers them.
func TestTCPBuffersCharged(t *testing.T) {
	b, opts := rootBackend(t)
	const limit = 64 << 20
	spec := suiteOpts.Spec(t, "tcphog", []string{"perl", "-e", tcpHog})
	spec.Step.Resources.Memory = limit
	spec.Step.Resources.TimeoutMS = 60_000
	res := runnertest.RunStep(t, b, spec)
	out := runnertest.ReadLog(t, spec, guest.StdoutFile)
	t.Logf("status %s, usage %+v: %s", res.Status, res.Usage, strings.TrimSpace(out))
	if res.Status != vmrunner.StatusSucceeded {
		t.Fatalf("result %+v; stderr %q", res, runnertest.ReadLog(t, spec, guest.StderrFile))
	}
	f := strings.Fields(out)
	if len(f) < 2 || f[0] != "queued" {
		t.Fatalf("unexpected output %q", out)
	}
	queued, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	// The kernel holds the group to its limit but still lets each socket
	// queue a minimal send buffer past it (a forced charge, about 64 KiB
	// each): allow 128 KiB per connection on top. Unlimited, the job
	// reaches the 160 MiB it stops at.
	if slack := int64(100 << 17); queued > limit+slack {
		t.Errorf("the job queued %d MiB in TCP buffers with a %d MiB memory limit (+%d MiB slack for 100 sockets)", queued>>20, limit>>20, slack>>20)
	}
	if queued < 1<<20 {
		t.Errorf("the job queued only %d bytes: the test did not exercise TCP buffers", queued)
	}
	assertClean(t, opts, spec)
}
