package diagsrc

import "net"

// Addrs are the bound GSMTAP addresses of s, indexed by SIM subscription,
// and its QCSuper NR address: the tests outside the package bind port 0
// and send to the ports the kernel chose.
func (s *GSMTAPSource) Addrs() (gsmtapAddrs []net.Addr, qcsuperNRAddr net.Addr) {
	for _, c := range s.gsmtapConns {
		gsmtapAddrs = append(gsmtapAddrs, c.LocalAddr())
	}
	return gsmtapAddrs, s.qcsuperConn.LocalAddr()
}
