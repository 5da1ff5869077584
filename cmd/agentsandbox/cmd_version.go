package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version is set at link time: -ldflags "-X main.version=v1.2.3".
var version = "dev"

// toolVersion is the version string records and `version` report.
func toolVersion() string {
	if version != "dev" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return version
}

func newVersionCmd(stdio Stdio) *cobra.Command {
	return &cobra.Command{
		Use:     "version",
		Short:   "Print the version of agentsandbox",
		Long:    "version prints the tool version (the one records carry), the platform and the Go version." + exitStatusHelp,
		Example: "  agentsandbox version",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			_, err := fmt.Fprintf(stdio.Out, "agentsandbox %s %s/%s %s\n", toolVersion(), runtime.GOOS, runtime.GOARCH, runtime.Version())
			return err
		},
	}
}
