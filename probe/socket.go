package probe

import (
	"net"

	"github.com/underlay-net/underlay/internal/rawlink"
	"golang.org/x/net/bpf"
)

// conn is what a probe or an announcement needs of its packet socket
// (a *rawlink.Link; the tests give fakes).
type conn interface {
	ReadFrom(b []byte) (int, net.Addr, error)
	WriteTo(b []byte, addr net.Addr) (int, error)
	// CloseLater leaves the socket's memberships at once and closes it
	// in the background (rawlink.Link.CloseLater).
	CloseLater()
}

// listen opens a SOCK_RAW packet socket for proto on parent, in the
// prober's namespace, with filter attached before it is bound (nothing
// else is ever queued on it). A non-nil unicast is added to parent's
// unicast address filter and groups to its multicast filter, for the
// socket's lifetime. The parent's own MAC is not added: it is there.
func (p *Prober) listen(parent string, proto int, filter []bpf.Instruction, unicast net.HardwareAddr, groups []net.HardwareAddr) (*rawlink.Link, error) {
	return rawlink.Listen(parent, rawlink.Config{Netns: p.netns, Who: "the prober's", Proto: proto, Filter: filter,
		Ethernet: "ARP and Neighbour Discovery need an Ethernet link", Unicast: unicast, Groups: groups})
}
