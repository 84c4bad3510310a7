package lancheck

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/underlay-net/underlay/dhcp"
	"github.com/underlay-net/underlay/dhcp6"
	"github.com/underlay-net/underlay/internal/lanmac"
	"github.com/underlay-net/underlay/probe"
	"golang.org/x/sys/unix"
)

// wire is what Observe sends and receives on the LAN.
type wire interface {
	// Offers sends a DISCOVER from mac (with a client ID of its own when
	// clientID: the parent's MAC) and returns every OFFER until ctx ends.
	Offers(ctx context.Context, parent string, mac net.HardwareAddr, clientID bool) ([]dhcp.Offer, error)
	// Routers sends router solicitations and returns every router
	// advertisement until ctx ends.
	Routers(ctx context.Context, parent string, mac net.HardwareAddr) ([]Router, error)
	// Advertises sends a DHCPv6 Solicit and returns every Advertise
	// until ctx ends.
	Advertises(ctx context.Context, parent string, mac net.HardwareAddr) ([]dhcp6.Advertisement, error)
	// Probe4 and Probe6 ask for target from mac on parent (an ARP probe,
	// a neighbour solicitation from ::).
	Probe4(ctx context.Context, parent string, mac net.HardwareAddr, target netip.Addr) Reach
	Probe6(ctx context.Context, parent string, mac net.HardwareAddr, target netip.Addr) Reach
	// ChildProbe4 makes a throwaway macvlan child of parent with mac and
	// asks for target from it; the error says why no child was made.
	ChildProbe4(ctx context.Context, parent string, mac net.HardwareAddr, target netip.Addr) (Reach, error)
}

// realWire is the wire of dhcp, dhcp6, probe and Routers.
type realWire struct{ env Env }

func (w realWire) prober() *probe.Prober { return probe.New(probe.WithNetns(w.env.Netns)) }

func (w realWire) Probe4(ctx context.Context, parent string, mac net.HardwareAddr, target netip.Addr) Reach {
	r := Reach{Target: target, From: mac.String()}
	answered(&r, w.prober().Probe(ctx, parent, mac, target, probeBudget))
	return r
}

func (w realWire) Probe6(ctx context.Context, parent string, mac net.HardwareAddr, target netip.Addr) Reach {
	r := Reach{Target: target, From: fmt.Sprintf("the parent %s (%s)", parent, mac)}
	answered(&r, w.prober().ProbeIPv6(ctx, parent, mac, target, probeBudget))
	return r
}

func (w realWire) ChildProbe4(ctx context.Context, parent string, mac net.HardwareAddr, target netip.Addr) (Reach, error) {
	t, err := w.env.Kernel.AddThrowaway(ctx, parent, mac, w.env.Mark)
	if errors.Is(err, unix.EPERM) {
		// No namespace without CAP_SYS_ADMIN (the managed plugin): the
		// new MAC goes out from the parent's socket instead, as an
		// endpoint's own probe does (the MAC is in the parent's unicast
		// filter while it runs). The switch sees the same frames.
		r := w.Probe4(ctx, parent, mac, target)
		r.From += " (from " + parent + "'s socket: no namespace for a child could be made)"
		return r, nil
	}
	if err != nil {
		return Reach{Target: target}, err
	}
	defer func() {
		if err := t.Close(); err != nil && w.env.Log != nil {
			w.env.Log.Warn("LAN preflight: could not delete its throwaway child", "parent", parent, "mac", mac.String(), "err", err)
		}
	}()
	r := Reach{Target: target, From: mac.String()}
	answered(&r, probe.New(probe.WithNetns(t.Netns)).Probe(ctx, t.Name, mac, target, probeBudget))
	return r, nil
}

// answered reads a probe's result: a conflict is the answer, except
// another host probing for the target too (no one holds it for that).
func answered(r *Reach, err error) {
	var c *probe.ConflictError
	switch {
	case errors.As(err, &c) && c.Probing:
	case errors.As(err, &c):
		r.Answered, r.AnswerMAC = true, c.MAC
	case err != nil:
		r.Err = err.Error()
	}
}

func (w realWire) Offers(ctx context.Context, parent string, mac net.HardwareAddr, clientID bool) ([]dhcp.Offer, error) {
	r := dhcp.Request{Parent: parent, MAC: mac}
	if clientID {
		// From the parent's MAC (ipvlan clients share it): a client ID of
		// its own (type 0, a name) keeps the server from taking it for
		// the host.
		r.ClientID = append([]byte{0}, "underlay-lan-check-"+lanmac.Random().String()...)
	}
	opts := []dhcp.Option{dhcp.WithNetns(w.env.Netns)}
	if w.env.Log != nil {
		opts = append(opts, dhcp.WithLogger(w.env.Log))
	}
	return collected(dhcp.New(opts...).Offers(ctx, r))
}

func (w realWire) Routers(ctx context.Context, parent string, mac net.HardwareAddr) ([]Router, error) {
	return collected(Routers(ctx, w.env.Netns, parent, mac))
}

func (w realWire) Advertises(ctx context.Context, parent string, mac net.HardwareAddr) ([]dhcp6.Advertisement, error) {
	r := dhcp6.Request{Parent: parent, MAC: mac, DUID: dhcp6.DUIDFromMAC(mac), IAID: [4]byte(mac[2:6])}
	opts := []dhcp6.Option{dhcp6.WithNetns(w.env.Netns)}
	if w.env.Log != nil {
		opts = append(opts, dhcp6.WithLogger(w.env.Log))
	}
	return collected(dhcp6.New(opts...).Advertises(ctx, r))
}

// collected keeps what a collector gathered: an error after answers came
// (a later retransmission that could not be sent) does not undo them.
func collected[T any](got []T, err error) ([]T, error) {
	if len(got) > 0 {
		return got, nil
	}
	return got, err
}
