package driver

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/docker/go-plugins-helpers/network"
	"github.com/underlay-net/underlay/driver/internal/config"
	"github.com/underlay-net/underlay/driver/internal/keylock"
	"github.com/underlay-net/underlay/driver/internal/plan"
	"github.com/underlay-net/underlay/internal/dockerid"
	"github.com/underlay-net/underlay/internal/pluginapi"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/underlay-net/underlay/store"
	"github.com/underlay-net/underlay/store/record"
)

// Endpoint requests never call Docker: dockerd makes them while starting
// containers, and a call back into it can deadlock it.

// CreateEndpoint records an endpoint and answers only what Docker left
// empty: a generated MAC for macvlan endpoints without one, and the
// addresses the LAN gave it (DHCP, DHCPv6, SLAAC).
func (d *Driver) CreateEndpoint(ctx context.Context, req *network.CreateEndpointRequest) (*network.CreateEndpointResponse, error) {
	ctx, unlock, n, existing, err := d.locks.Endpoint(ctx, d.store, req.NetworkID, req.EndpointID)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if n == nil || n.Pending != nil {
		return nil, notFound("network", req.NetworkID)
	}
	ep, ifname, generated, err := d.newEndpoint(ctx, *n, req, existing)
	if err != nil {
		return nil, err
	}
	grants, err := d.addresses(ctx, *n, &ep, existing)
	defer grants.unclaim() // once recorded, or not
	if err != nil {
		return nil, err
	}
	d.point("create-endpoint/before-commit")
	if err := d.recordEndpoint(*n, &ep, grants); err != nil {
		grants.undo()
		return nil, endpointNotRecorded(req.NetworkID, ep, err)
	}
	d.point("create-endpoint/after-commit")
	d.created(*n, ep, existing, ifname)
	grants.start()
	return grants.answer(ep, generated), nil
}

// newEndpoint is the endpoint a create asks for, before its addresses
// from the LAN: its MAC (generated is whether this daemon chose it), its
// addresses from Docker, and the container's interface name.
func (d *Driver) newEndpoint(ctx context.Context, n record.Network, req *network.CreateEndpointRequest, existing *record.Endpoint) (ep record.Endpoint, ifname string, generated bool, err error) {
	iface := req.Interface
	if iface == nil {
		iface = &network.EndpointInterface{}
	}
	ep = record.Endpoint{NetworkID: n.ID, ID: req.EndpointID}
	switch {
	case iface.MacAddress != "" && n.Type == kernel.KindIpvlan:
		return ep, "", false, config.Invalidf("endpoint %s asks for MAC %s, but ipvlan endpoints share the MAC address of parent %s: drop --mac-address, or use a macvlan network", dockerid.Short(req.EndpointID), iface.MacAddress, n.Parent)
	case iface.MacAddress != "":
		mac, err := net.ParseMAC(iface.MacAddress)
		if err != nil || len(mac) != 6 {
			return ep, "", false, config.Invalidf("MAC address %q of endpoint %s is not a 48-bit MAC such as 02:42:c6:12:01:02", iface.MacAddress, dockerid.Short(req.EndpointID))
		}
		if mac[0]&1 == 1 {
			return ep, "", false, config.Invalidf("MAC address %s of endpoint %s is a multicast address: use a unicast MAC (first byte even)", mac, dockerid.Short(req.EndpointID))
		}
		ep.MAC = mac.String()
	}
	if ifname, err = config.EndpointIfName(req.Options); err != nil {
		return ep, "", false, err
	}
	if ep.IPv4, err = config.EndpointAddr(iface.Address, false); err != nil {
		return ep, "", false, err
	}
	if ep.IPv6, err = config.EndpointAddr(iface.AddressIPv6, true); err != nil {
		return ep, "", false, err
	}
	if n.Config.DHCP.FromIPAM || n.Config.DHCP.FromIPAM6 {
		mac, err := d.leaseMAC(n, ep, ep.MAC)
		if err != nil {
			return ep, "", false, err
		}
		if ep.MAC == "" && mac != "" {
			ep.MAC, generated = mac, true
		}
	}
	if ep.MAC == "" && n.Type == kernel.KindMacvlan {
		ep.MAC, generated = d.macs.Choose(ctx, n, ep, existing), true
	}
	return ep, ifname, generated, nil
}

// addresses asks each address source in turn; when one fails, what the
// earlier ones gave is given back.
func (d *Driver) addresses(ctx context.Context, n record.Network, ep *record.Endpoint, existing *record.Endpoint) (grants, error) {
	var gs grants
	for _, source := range []addrSource{d.staticAddrs, d.ipamLeases, d.dhcpAddr, d.lanIPv6} {
		g, err := source(ctx, n, ep, existing)
		gs = append(gs, g)
		if err != nil {
			gs.undo()
			return gs, err
		}
	}
	return gs, nil
}

// recordEndpoint commits the endpoint's record under its link name (the
// alternative one when another endpoint's link holds it), with its
// sources' part (grants.commit).
func (d *Driver) recordEndpoint(n record.Network, ep *record.Endpoint, gs grants) error {
	return d.store.Batch(func(tx *store.Tx) error {
		ep.Link = config.EndpointLinkName(ep.ID)
		if other, ok, err := tx.EndpointByLink(ep.Link); err != nil {
			return err
		} else if ok && other.ID != ep.ID {
			ep.Link = config.AltEndpointLinkName(ep.ID)
		}
		if err := hostRouteFree(tx, n, *ep); err != nil {
			return err
		}
		if err := gs.commit(tx); err != nil {
			return err
		}
		return tx.PutEndpoint(*ep)
	})
}

// endpointNotRecorded is the error of a create whose record could not be
// committed.
func endpointNotRecorded(netID string, ep record.Endpoint, err error) error {
	switch {
	case errors.Is(err, store.ErrNoNetwork):
		return notFound("network", netID)
	case errors.Is(err, pluginapi.ErrConflict):
		return err
	}
	return fmt.Errorf("record endpoint %s: %w", dockerid.Short(ep.ID), err)
}

// created is what follows an endpoint's record: a record written anew
// has no join and no announcements.
func (d *Driver) created(n record.Network, ep record.Endpoint, existing *record.Endpoint, ifname string) {
	if existing != nil {
		d.joins.Drop(ep.ID) // the record was written anew, without a join
		d.lan.StopAnnouncing(ep.ID)
	}
	d.ifnames.Set(ep.ID, ifname)
	d.log.Debug("created endpoint", "network", n.ID, "endpoint", ep.ID, "link", ep.Link, "mac", ep.MAC)
}

// Leave deletes the endpoint's link if libnetwork has already moved it back
// to the host namespace (DeleteEndpoint deletes it otherwise) and forgets
// the sandbox.
func (d *Driver) Leave(ctx context.Context, req *network.LeaveRequest) error {
	return d.unplug(ctx, "leave", req.NetworkID, req.EndpointID, func(_ record.Network, ep record.Endpoint) func(*store.Tx) error {
		return d.joins.Leave(ep) // driver/internal/joins: a join kept in memory, or none, writes nothing
	})
}

// DeleteEndpoint deletes the endpoint's link and record. An unknown
// endpoint is not an error, so Docker can always clean up.
func (d *Driver) DeleteEndpoint(ctx context.Context, req *network.DeleteEndpointRequest) error {
	var deleted *record.Endpoint
	var of record.Network
	if err := d.unplug(ctx, "delete-endpoint", req.NetworkID, req.EndpointID, func(n record.Network, ep record.Endpoint) func(*store.Tx) error {
		deleted, of = &ep, n
		journal := d.leases.Deletion(ctx, n, ep) // held leases: released below, or at the next start
		return func(tx *store.Tx) error {
			for _, r := range journal {
				if err := tx.PutPendingRelease(r); err != nil {
					return err
				}
			}
			return tx.DeleteEndpoint(ep.NetworkID, ep.ID)
		}
	}); err != nil {
		return err
	}
	if deleted != nil {
		d.joins.Drop(deleted.ID) // after the commit: a failed one keeps the join
		d.leases.Forget(context.WithoutCancel(ctx), of, *deleted)
	}
	d.ifnames.Set(req.EndpointID, "")
	return nil
}

// unplug is Leave and DeleteEndpoint: under the endpoint's lock it deletes
// the endpoint's link from the host namespace (for an unknown endpoint,
// only a macvlan/ipvlan of its link name that carries underlay's mark and
// no known endpoint owns), then commits the change record gives for the
// endpoint's record (given with its network, read under the same lock),
// if there is one and it gives one.
func (d *Driver) unplug(ctx context.Context, phase, netID, epID string, record func(record.Network, record.Endpoint) func(*store.Tx) error) error {
	ctx, unlock, n, ep, err := d.locks.Endpoint(ctx, d.store, netID, epID)
	if err != nil {
		return err
	}
	defer unlock()
	// The endpoint leaves or goes: no more announcements of it, and no more
	// reading of its interface in the container (should the request fail
	// below, the container is being torn down: neither is wanted back).
	d.lan.StopAnnouncing(epID)
	d.reads.Stop(epID)
	if ep != nil && n != nil && n.HostAddress != "" {
		// The route goes and the record changes under the parent's lock,
		// which the repair of the host link holds while it reads the
		// routes and puts them back: no route outlives its endpoint.
		_, unlockParent, err := d.locks.Acquire(ctx, keylock.Exclusive(keylock.ParentKey(n.Parent)))
		if err != nil {
			return err
		}
		defer unlockParent()
	}
	if ep != nil {
		if err := d.shims.Route(ctx, n, *ep, true); err != nil {
			return fmt.Errorf("remove the host's route to endpoint %s: %w", dockerid.Short(epID), err)
		}
	}
	link := config.EndpointLinkName(epID)
	known := ep != nil
	if known {
		link = ep.Link
	} else if err := d.store.View(func(tx *store.Tx) (err error) {
		_, known, err = tx.EndpointByLink(link)
		return err
	}); err != nil {
		return err
	} else if known {
		link = "" // another endpoint's link: not this request's to delete
	}
	what := map[string]string{"leave": "leave endpoint", "delete-endpoint": "delete endpoint"}[phase]
	before, after := "leave/before-link-delete", "leave/after-link-delete"
	if phase == "delete-endpoint" {
		before, after = "delete-endpoint/before-link-delete", "delete-endpoint/after-link-delete"
	}
	d.point(before)
	if link != "" {
		if err := d.owned.Delete(ctx, link, ep != nil); err != nil {
			return fmt.Errorf("%s %s: %w", what, dockerid.Short(epID), err)
		}
	}
	d.point(after)
	if ep == nil {
		d.log.Debug(what+" of unknown endpoint: nothing to record", "network", netID, "endpoint", epID)
		return nil
	}
	change := record(*n, *ep)
	if change == nil {
		return nil
	}
	if phase == "delete-endpoint" {
		d.point("delete-endpoint/before-commit")
	}
	if err := d.store.Batch(change); err != nil {
		return fmt.Errorf("%s %s: %w", what, dockerid.Short(ep.ID), err)
	}
	if phase == "delete-endpoint" {
		d.point("delete-endpoint/after-commit")
	}
	d.log.Debug(what+" done", "network", ep.NetworkID, "endpoint", ep.ID, "link", link)
	return nil
}

// EndpointInfo reports the endpoint's host link, parent and MAC.
func (d *Driver) EndpointInfo(ctx context.Context, req *network.InfoRequest) (*network.InfoResponse, error) {
	ctx, unlock, n, ep, err := d.locks.Endpoint(ctx, d.store, req.NetworkID, req.EndpointID)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if n == nil {
		return nil, notFound("network", req.NetworkID)
	}
	if ep == nil {
		return nil, notFound("endpoint", req.EndpointID)
	}
	v := map[string]string{"link": ep.Link, "parent": n.Parent, "type": n.Type, "mode": n.Mode}
	if asked := plan.RequestedParent(*n); asked != "" && asked != n.Parent {
		v["parent_option"] = asked // the parent as asked; "parent" is the link this host chose
	}
	if ep.MAC != "" {
		v["mac"] = ep.MAC
	}
	return &network.InfoResponse{Value: v}, nil
}
