package rrc

import (
	"fmt"

	"github.com/m2ho/m2ho/pkg/diag"
)

// connectionMeas is the measurement configuration of one RAT across RRC
// connections.
//
// Leaving RRC_CONNECTED releases the measConfig, and the next connection
// starts without one, so current starts afresh at every release or new
// connection. Modem logs do not always agree: a dual-SIM modem logs the
// signalling of its other subscription in the same stream (a connection
// request, setup and release within 150 ms in the shared EN-DC captures),
// and the UE goes on reporting measIds of the connection that never
// ended. merged is the configuration as if no release had happened, kept
// up to date with every later change; a report that resolves only
// through it proves the release was not this connection's, and merged
// becomes the configuration in force again.
type connectionMeas struct {
	current *measState
	// merged is nil until the first release.
	merged *measState
}

func newConnectionMeas() *connectionMeas {
	return &connectionMeas{current: newMeasState()}
}

// reset starts a new connection's configuration.
func (c *connectionMeas) reset() {
	if c.merged == nil {
		c.merged = c.current
	}
	c.current = newMeasState()
}

// apply applies a measConfig to the configuration in force and to the
// one without the releases.
func (c *connectionMeas) apply(d *MeasConfigDelta) {
	c.current.apply(d)
	if c.merged != nil {
		c.merged.apply(d)
	}
}

// followHandover re-links measIds after a handover, in both
// configurations.
func (c *connectionMeas) followHandover(rat diag.RAT, source, target uint32) {
	c.current.followHandover(rat, source, target)
	if c.merged != nil {
		c.merged.followHandover(rat, source, target)
	}
}

// resolving returns the configuration that resolves measID to a report
// configuration: the current one, or the merged one, which then becomes
// current (see connectionMeas); restored says it did, the proof that
// the releases since the first were not this connection's.
func (c *connectionMeas) resolving(measID int) (m *measState, restored bool, err error) {
	err = c.current.resolves(measID)
	if err == nil {
		return c.current, false, nil
	}
	if c.merged != nil && c.merged.resolves(measID) == nil {
		c.current, c.merged = c.merged, nil
		return c.current, true, nil
	}
	return nil, false, err
}

// resolves reports why measID does not resolve to a report
// configuration, nil when it does.
func (m *measState) resolves(measID int) error {
	link, ok := m.measIDs[measID]
	if !ok {
		return fmt.Errorf("measId %d", measID)
	}
	if _, ok := m.reports[link.Report]; !ok {
		return fmt.Errorf("measId %d names reportConfig %d", measID, link.Report)
	}
	return nil
}
