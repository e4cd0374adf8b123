package nsexec_test

import (
	"errors"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netns"

	"github.com/m2ho/m2ho/internal/nsexec"
	"github.com/m2ho/m2ho/internal/nstest"
)

// TestRunJoinsAndLeaves runs code in a fresh namespace and checks that it
// ran there, that the calling thread is back where it was, and that the
// code's error comes back as it is.
func TestRunJoinsAndLeaves(t *testing.T) {
	nstest.RequireRoot(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	origin, err := netns.Get()
	require.NoError(t, err)
	defer origin.Close()
	target, err := netns.New() // moves this thread into it
	require.NoError(t, err)
	defer target.Close()
	require.NoError(t, netns.Set(origin))

	inside := false
	require.NoError(t, nsexec.Run(target, func() error {
		current, err := netns.Get()
		if err != nil {
			return err
		}
		defer current.Close()
		inside = current.Equal(target)
		return nil
	}))
	assert.True(t, inside, "fn ran in the target namespace")
	current, err := netns.Get()
	require.NoError(t, err)
	defer current.Close()
	assert.True(t, current.Equal(origin), "the thread is back in its namespace")

	failure := errors.New("fn failed")
	assert.ErrorIs(t, nsexec.Run(target, func() error { return failure }), failure)
	assert.ErrorIs(t, nsexec.Run(origin, func() error { return failure }), failure, "in the namespace already")
}
