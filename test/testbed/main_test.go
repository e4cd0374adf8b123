package testbed

import (
	"os"
	"testing"

	"github.com/m2ho/m2ho/test/emu"
)

func TestMain(m *testing.M) {
	// As the m2ho-testbed command does: no collector pauses in the
	// packet path.
	emu.TuneRuntime()
	os.Exit(m.Run())
}
