// Command fakeserve serves the real sandboxes manager on the fake backend
// (package managertest) with the real REST server, FOR TESTS OF CLIENTS
// ONLY: the Python and JS clients can run against the server and manager
// users get, without root, KVM or Nix.
//
// IT ISOLATES NOTHING: every sandbox's workspace is a temporary directory
// on the host and every exec runs there as the calling user. Never expose
// it.
//
//	go run ./internal/managertest/fakeserve -socket /tmp/as.sock
//	go run ./internal/managertest/fakeserve -tcp 127.0.0.1:0 -token secret
//
// Once it listens it prints one line, "listening on unix PATH" or
// "listening on tcp ADDR" (with the port chosen), to stdout; SIGINT or
// SIGTERM shut it down gracefully and remove its directory.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/agentsandbox/agentsandbox/internal/managertest"
	"github.com/agentsandbox/agentsandbox/sandboxes"
	"github.com/agentsandbox/agentsandbox/server"
)

func main() {
	socket := flag.String("socket", "", "serve on a unix socket at this path")
	tcp := flag.String("tcp", "", "serve on this TCP address (needs -token), such as 127.0.0.1:0")
	token := flag.String("token", "", "the bearer token TCP clients must send")
	maxSandboxes := flag.Int("max-sandboxes", 0, "answer limit_exceeded past this many running sandboxes (0: no limit)")
	flag.Parse()
	if err := run(*socket, *tcp, *token, *maxSandboxes); err != nil {
		fmt.Fprintf(os.Stderr, "fakeserve: %v\n", err)
		os.Exit(1)
	}
}

func run(socket, tcp, token string, maxSandboxes int) error {
	if (socket == "") == (tcp == "") {
		return fmt.Errorf("give exactly one of -socket PATH and -tcp ADDR")
	}
	dir, err := os.MkdirTemp("", "fakeserve-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	fake, err := managertest.Open(dir, sandboxes.Options{MaxSandboxes: maxSandboxes})
	if err != nil {
		return err
	}
	// The server closes the manager when it shuts down.
	s, err := server.New(server.Options{Manager: fake, Token: token, Version: "fake",
		Logf: func(f string, a ...any) { fmt.Fprintf(os.Stderr, "fakeserve: "+f+"\n", a...) }})
	if err != nil {
		return err
	}
	var l net.Listener
	if socket != "" {
		l, err = server.ListenUnix(socket)
	} else {
		if token == "" {
			return fmt.Errorf("-tcp needs -token: TCP clients must authenticate")
		}
		l, err = net.Listen("tcp", tcp)
	}
	if err != nil {
		return err
	}
	fmt.Printf("listening on %s %s\n", l.Addr().Network(), l.Addr())
	served := make(chan error, 1)
	go func() { served <- s.Serve(l) }()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	select {
	case err := <-served:
		return err
	case <-sig:
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return s.Shutdown(ctx)
}
