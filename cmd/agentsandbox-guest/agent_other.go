//go:build !linux

package main

import (
	"fmt"
	"os"
)

func agentMain([]string) int {
	fmt.Fprintln(os.Stderr, "agentsandbox-guest: runs on Linux guests only")
	return 1
}
