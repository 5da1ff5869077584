package inputs

import (
	"testing"

	"github.com/agentsandbox/agentsandbox/internal/testtier"
)

// testtierCommand needs a program installed by CI (git) through testtier,
// so it is a skip here and a failure in CI.
func testtierCommand(t *testing.T, name string) {
	t.Helper()
	testtier.Command(t, name, name, "install Debian's "+name)
}
