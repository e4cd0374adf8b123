package datapath

import (
	"errors"
	"sync"
)

// ErrClosed reports a call on a closed Datapath.
var ErrClosed = errors.New("datapath: closed")

// mapGuard lets the methods that read or write the maps run while Close
// waits for them before it frees the maps (the flow table is memory
// mapped: a read after the unmap would fault). Once Close has begun, no
// new use starts. Uses nest freely, unlike read locks, which a waiting
// writer would deadlock.
type mapGuard struct {
	mu     sync.Mutex
	idle   *sync.Cond
	users  int
	closed bool
}

// enter starts a use of the maps, or returns ErrClosed. Every successful
// enter is paired with a leave.
func (g *mapGuard) enter() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return ErrClosed
	}
	g.users++
	return nil
}

func (g *mapGuard) leave() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.users--
	if g.users == 0 && g.idle != nil {
		g.idle.Broadcast()
	}
}

// close refuses new uses and waits for those under way to end.
func (g *mapGuard) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
	if g.idle == nil {
		g.idle = sync.NewCond(&g.mu)
	}
	for g.users > 0 {
		g.idle.Wait()
	}
}
