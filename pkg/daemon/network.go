package daemon

import "github.com/m2ho/m2ho/pkg/diag"

// Sources of the network in use (NetworkStatus.Source).
const (
	// NetworkFromConfig: the configuration names it (the fleet's
	// network), whatever the modem says.
	NetworkFromConfig = "config"
	// NetworkFromModem: the network the modem registered with, from its
	// RRC connection setup (diag network events).
	NetworkFromModem = "modem"
)

// NetworkStatus is the mobile network the learnt statistics and the
// buffer estimates belong to, in /status.
type NetworkStatus struct {
	// Network is the one in use, "" while none is known: the records of
	// no network are used then.
	Network string `json:"network"`
	// Source is NetworkFromConfig, NetworkFromModem, or "" with none.
	Source string `json:"source,omitempty"`
	// Modem is the network the modem last named, "" until it names one.
	Modem string `json:"modem,omitempty"`
	// Mismatches counts the networks the modem named that were not the
	// configured one.
	Mismatches uint64 `json:"mismatches"`
}

// networkState follows the network; the loop owns it.
type networkState struct {
	configured, modem string
	mismatches        uint64
}

func (n *networkState) status() NetworkStatus {
	switch {
	case n.configured != "":
		return NetworkStatus{Network: n.configured, Source: NetworkFromConfig, Modem: n.modem, Mismatches: n.mismatches}
	case n.modem != "":
		return NetworkStatus{Network: n.modem, Source: NetworkFromModem, Modem: n.modem}
	}
	return NetworkStatus{}
}

// handleNetwork takes the network a diag event names. With a network in
// the configuration, that one stays: a fleet shares its cells under it,
// and the hosts of a fleet must agree on it; a modem naming another is
// logged and counted, as one of the two is wrong (a roaming SIM, a
// configuration copied from another fleet). Without one, the machine and
// the estimator go on with what the store holds of the modem's network.
func (d *Daemon) handleNetwork(ev diag.Event) {
	n := &d.network
	if ev.PLMN == "" || ev.PLMN == n.modem {
		return
	}
	n.modem = ev.PLMN
	switch {
	case n.configured == "":
		d.logger.Info("mobile network named by the modem; learnt statistics and buffer estimates follow it", "network", ev.PLMN)
		d.est.UseNetwork(ev.PLMN)
		if err := d.machine.UseNetwork(ev.PLMN); err != nil {
			d.logger.Warn("learnt statistics of the network unreadable, learning them again from scratch", "network", ev.PLMN, "err", err)
		}
	case n.configured != ev.PLMN:
		n.mismatches++
		d.logger.Warn("the modem names another mobile network than the configuration; keeping the configured one",
			"modem", ev.PLMN, "configured", n.configured)
	}
}
