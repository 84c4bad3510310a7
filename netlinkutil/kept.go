package netlinkutil

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// The host as requests read it. A dump of the namespace's links, addresses
// or routes costs in proportion to the host (about 150 ms at 8,000 links),
// so once Keep has run the Kernel answers LinkByIndex, LinkByName, LinksOn, Addrs,
// AddrsNear, Routes and RoutesVia from state it keeps current from the
// kernel's rtnetlink events (links, IPv4 and IPv6 addresses and routes).
//
// What the events tell exactly: a link's name, MAC, MTU, up flag, kind
// and lower link; addresses; routes (IPv4 drops a link's routes without
// telling when it goes down: kept does the same). What they do not: the
// kernel announces a change of a link's alias or altnames only while the
// link is up (netdev_state_change), and underlay marks its links while
// they are down. So kept links carry no Alias and no AltNames, and Get
// and List (marks, names by altname) always ask the kernel, whose lookup
// by name does not grow with the host.
//
// Every read first applies the events the kernel has queued on the
// subscription socket (one non-blocking receive when there are none), and
// events are only taken off the socket under the same lock: a change the
// kernel made before the read began is always in the answer. A missed
// event (ENOBUFS: the socket's buffer overflowed) is recovered by reading
// everything again before anything is answered, never by a stale answer.

// KeepOptions tune Keep.
type KeepOptions struct {
	Log *slog.Logger
	// Buffer is the subscription socket's receive buffer in bytes
	// (default 8 MiB; tests make it small to overflow it).
	Buffer int
	// Unfollowed leaves the events on the socket until a read applies
	// them (no reader in the background): tests of the overflow use it.
	Unfollowed bool
}

// kept is the kept state of a Kernel.
type kept struct {
	k    *Kernel
	log  *slog.Logger
	sock *nl.NetlinkSocket
	fd   int
	buf  []byte

	// mu is held while messages are taken off the socket and applied, and
	// while the state is read.
	mu       sync.Mutex
	links    map[int]kernel.Link
	names    map[string]int // the links' indexes by name
	children map[int]map[int]struct{}
	addrs    map[int]map[netip.Prefix]struct{}
	// near indexes the addresses for AddrsNear: by their subnet, and by
	// the /24 (IPv4) or /64 (IPv6) they are in.
	bySubnet, byBucket map[netip.Prefix]map[kernel.Addr]struct{}
	routes             map[routeID][]kernel.Route
	byLink             map[int]map[routeID]struct{}
	// routesStale is set when the kernel may have changed routes without
	// an event that says which (below): the next route read reads them
	// all again first.
	routesStale bool
	rereads     int
	// missed is set from an overflow until a full read succeeds: nothing
	// is answered from the state meanwhile.
	missed bool
	closed bool
	done   chan struct{} // closed by Kernel.Close
}

// routeID identifies a route entry as the kernel does (table, destination,
// TOS, metric), with its type and, for a single next hop, the next hop.
type routeID struct {
	family uint8
	table  int
	dst    netip.Prefix
	tos    uint8
	prio   int
	typ    uint8
	scope  uint8
	proto  uint8
	src    netip.Addr // the preferred source
	oif    int
	gw     netip.Addr
}

// Keep starts keeping the namespace's links, addresses and routes, reading
// them whole once; the Kernel's reads answer from them from then on. It
// stops when ctx ends (or at Close).
func (k *Kernel) Keep(ctx context.Context, o KeepOptions) error {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Buffer == 0 {
		o.Buffer = 8 << 20
	}
	groups := []uint{unix.RTNLGRP_LINK, unix.RTNLGRP_IPV4_IFADDR, unix.RTNLGRP_IPV6_IFADDR, unix.RTNLGRP_IPV4_ROUTE, unix.RTNLGRP_IPV6_ROUTE}
	sock, err := nl.SubscribeAt(k.ns, netns.None(), unix.NETLINK_ROUTE, groups...)
	if err != nil {
		return fmt.Errorf("subscribe to the kernel's link, address and route events: %w", err)
	}
	if err := sock.SetReceiveBufferSize(o.Buffer, true); err != nil {
		if err := sock.SetReceiveBufferSize(o.Buffer, false); err != nil {
			sock.Close()
			return fmt.Errorf("size the event socket's buffer: %w", err)
		}
	}
	s := &kept{k: k, log: o.Log, sock: sock, fd: sock.GetFd(), buf: make([]byte, 1<<16), done: make(chan struct{})}
	s.mu.Lock()
	err = s.reread(ctx)
	s.mu.Unlock()
	if err != nil {
		sock.Close()
		return err
	}
	if old := k.kept.Swap(s); old != nil {
		old.stop()
	}
	if o.Unfollowed {
		context.AfterFunc(ctx, s.stop)
	} else {
		go s.follow(ctx)
	}
	return nil
}

// stop ends the kept state: the socket closes and reads go to the kernel.
func (s *kept) stop() {
	s.k.kept.CompareAndSwap(s, nil)
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		close(s.done)
		s.sock.Close()
	}
}

// Keeping reports whether reads answer from the kept state (Keep ran, it
// follows the kernel, and no missed event awaits a full read).
func (k *Kernel) Keeping() bool {
	s := k.kept.Load()
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.closed && !s.missed
}

// Rereads is how many times the kept state was read whole again after a
// missed event (0 without Keep).
func (k *Kernel) Rereads() int {
	s := k.kept.Load()
	if s == nil {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rereads
}

// follow applies events as they come until ctx ends or the Kernel closes.
func (s *kept) follow(ctx context.Context) {
	defer s.stop()
	fds := []unix.PollFd{{Fd: int32(s.fd), Events: unix.POLLIN}}
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.done:
			return
		default:
		}
		n, err := unix.Poll(fds, 200)
		if err != nil && !errors.Is(err, unix.EINTR) {
			s.log.Error("stopped following the kernel's events; requests read the kernel again", "error", err)
			return
		}
		if n <= 0 {
			continue
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return
		}
		err = s.drain(ctx)
		s.mu.Unlock()
		if err != nil {
			// The state stays marked missed (reads ask the kernel): try
			// again shortly.
			s.log.Warn("could not read the host again after missed kernel events; requests read the kernel until it succeeds", "error", err)
			select {
			case <-ctx.Done():
				return
			case <-s.done:
				return
			case <-time.After(time.Second):
			}
		}
	}
}

// sync applies what the kernel has queued; the caller holds mu.
func (s *kept) sync(ctx context.Context) error {
	if s.closed {
		return errKeptClosed
	}
	return s.drain(ctx)
}

var errKeptClosed = errors.New("the kept state is closed")

// drain takes every queued message off the socket and applies it. The
// caller holds mu.
//
// After an overflow (ENOBUFS) the kernel drops every new event until the
// queue has been emptied once, and what is still queued is older than a
// read made now: so the queue is emptied first and thrown away, then
// everything is read again, and what comes after is applied on top (each
// change after the emptying is an event after it). Until that read
// succeeds the state is marked missed and answers nothing.
func (s *kept) drain(ctx context.Context) error {
	for {
		if s.missed {
			if err := s.discard(); err != nil {
				return err
			}
			if err := s.reread(ctx); err != nil {
				return err
			}
			s.missed = false
			s.rereads++
		}
		n, _, err := unix.Recvfrom(s.fd, s.buf, unix.MSG_DONTWAIT)
		switch {
		case errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EWOULDBLOCK):
			if s.routesStale {
				if err := s.rereadRoutes(ctx); err != nil {
					return err
				}
			}
			return nil
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.ENOBUFS):
			s.log.Warn("missed kernel events (the event socket's buffer overflowed): reading the host's links, addresses and routes again")
			s.missed = true
			continue
		case err != nil:
			return fmt.Errorf("receive the kernel's events: %w", err)
		}
		msgs, perr := syscall.ParseNetlinkMessage(s.buf[:n])
		if perr != nil || n == len(s.buf) { // unreadable, or maybe cut short
			s.log.Warn("could not read a kernel event: reading the host's links, addresses and routes again", "bytes", n, "error", perr)
			s.missed = true
			continue
		}
		for _, m := range msgs {
			s.apply(m)
		}
	}
}

// discard empties the socket's queue.
func (s *kept) discard() error {
	for {
		_, _, err := unix.Recvfrom(s.fd, s.buf, unix.MSG_DONTWAIT)
		switch {
		case errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EWOULDBLOCK):
			return nil
		case err == nil || errors.Is(err, unix.EINTR) || errors.Is(err, unix.ENOBUFS):
			continue
		default:
			return fmt.Errorf("receive the kernel's events: %w", err)
		}
	}
}

// reread replaces the state with a full read of the kernel; the caller
// holds mu.
func (s *kept) reread(ctx context.Context) error {
	var ls []netlink.Link
	if err := s.k.retry(ctx, func(h *netlink.Handle) (err error) { ls, err = h.LinkList(); return err }); err != nil {
		return fmt.Errorf("list links: %w", err)
	}
	addrs, err := s.k.readAddrs(ctx)
	if err != nil {
		return err
	}
	rs, err := s.k.readRoutes(ctx)
	if err != nil {
		return err
	}
	s.links, s.names, s.children = map[int]kernel.Link{}, map[string]int{}, map[int]map[int]struct{}{}
	s.addrs = map[int]map[netip.Prefix]struct{}{}
	s.bySubnet, s.byBucket = map[netip.Prefix]map[kernel.Addr]struct{}{}, map[netip.Prefix]map[kernel.Addr]struct{}{}
	for _, l := range ls {
		s.putLink(convert(l))
	}
	for _, a := range addrs {
		s.putAddr(a)
	}
	s.setRoutes(rs)
	return nil
}

// rereadRoutes replaces the routes with a full read (routesStale); the
// caller holds mu. Events after it are applied on top.
func (s *kept) rereadRoutes(ctx context.Context) error {
	rs, err := s.k.readRoutes(ctx)
	if err != nil {
		return err
	}
	s.setRoutes(rs)
	return nil
}

func (s *kept) setRoutes(rs []netlink.Route) {
	s.routes, s.byLink = map[routeID][]kernel.Route{}, map[int]map[routeID]struct{}{}
	for _, r := range rs {
		id, out := routeOf(r)
		s.putRoute(id, out)
	}
	s.routesStale = false
}

// routesChangedUnannounced marks the routes for a full read before the
// next route read: the kernel removes routes without an event when a link
// goes down (IPv4; IPv6 too with skip_notify_on_dev_down) or away with
// routes through it, a multipath route loses a next hop, or a link's last
// IPv4 address (or a route's preferred source) goes; IPv6 multipath
// events and replacements name routes by more than the key kept here.
// None of these comes with a container's start: its link is down and
// routeless in this namespace.
func (s *kept) routesChangedUnannounced() { s.routesStale = true }

// apply applies one event.
func (s *kept) apply(m syscall.NetlinkMessage) {
	switch m.Header.Type {
	case unix.RTM_NEWLINK, unix.RTM_DELLINK:
		// A bridge tells of its ports' changes, and of a port leaving it,
		// as AF_BRIDGE link messages with part of the link's state: only
		// the link's own (AF_UNSPEC) messages are its state.
		if len(m.Data) < unix.SizeofIfInfomsg || nl.DeserializeIfInfomsg(m.Data).Family != unix.AF_UNSPEC {
			return
		}
	}
	switch m.Header.Type {
	case unix.RTM_NEWLINK:
		if wireless(m.Data) { // a wireless extension's event, not the link's state
			return
		}
		h := unix.NlMsghdr{Len: m.Header.Len, Type: m.Header.Type, Flags: m.Header.Flags, Seq: m.Header.Seq, Pid: m.Header.Pid}
		l, err := netlink.LinkDeserialize(&h, m.Data)
		if err != nil || l.Attrs().Name == "" {
			s.missed = true // a link's state that could not be read
			return
		}
		now := convert(l)
		s.dropLink(now.Index)
		s.putLink(now)
		if now.Down && len(s.byLink[now.Index]) > 0 {
			s.routesChangedUnannounced()
		}
	case unix.RTM_DELLINK:
		idx := int(nl.DeserializeIfInfomsg(m.Data).Index)
		s.dropLink(idx)
		for p := range s.addrs[idx] {
			s.dropAddr(kernel.Addr{Prefix: p, LinkIndex: idx})
		}
		// A link that goes takes its routes: IPv6 has told of them (unless
		// skip_notify_on_dev_down), IPv4 has not, and a multipath route
		// only loses a next hop.
		for id := range s.byLink[idx] {
			if id.family == unix.AF_INET6 && id.oif == idx {
				s.dropRoute(id)
			}
		}
		if len(s.byLink[idx]) > 0 {
			s.routesChangedUnannounced()
		}
	case unix.RTM_NEWADDR, unix.RTM_DELADDR:
		a, ok := addrOf(m.Data)
		if !ok {
			s.missed = true
			return
		}
		if m.Header.Type == unix.RTM_NEWADDR {
			s.putAddr(a)
			return
		}
		s.dropAddr(a)
		if a.Prefix.Addr().Is4() {
			s.routesChangedUnannounced()
		}
	case unix.RTM_NEWROUTE, unix.RTM_DELROUTE:
		id, out, multipath, ok := parseRoute(m.Data)
		switch {
		case !ok:
			return // a cloned route, not a route
		case multipath && id.family == unix.AF_INET6, m.Header.Flags&unix.NLM_F_REPLACE != 0:
			s.routesChangedUnannounced()
		case m.Header.Type == unix.RTM_DELROUTE:
			if _, known := s.routes[id]; !known {
				s.routesChangedUnannounced()
			}
			s.dropRoute(id)
		default:
			s.putRoute(id, out)
		}
	}
}

// wireless reports whether a link message carries IFLA_WIRELESS.
func wireless(b []byte) bool {
	attrs, err := nl.ParseRouteAttr(b[unix.SizeofIfInfomsg:])
	if err != nil {
		return false
	}
	for _, a := range attrs {
		if a.Attr.Type == unix.IFLA_WIRELESS {
			return true
		}
	}
	return false
}

// Unannounced clears what the kernel's events do not keep exact, what
// LinkByIndex, LinkByName and LinksOn leave out (nltest's too): the kernel announces a change of the alias, the altnames or a macvlan/ipvlan mode
// only while the link is up.
func Unannounced(l kernel.Link) kernel.Link {
	l.Alias, l.AltNames, l.Mode, l.Flag = "", nil, "", ""
	return l
}

func (s *kept) putLink(l kernel.Link) {
	l = Unannounced(l)
	s.links[l.Index] = l
	s.names[l.Name] = l.Index
	if l.ParentIndex != 0 && l.ParentIndex != l.Index {
		c := s.children[l.ParentIndex]
		if c == nil {
			c = map[int]struct{}{}
			s.children[l.ParentIndex] = c
		}
		c[l.Index] = struct{}{}
	}
}

func (s *kept) dropLink(idx int) {
	l, ok := s.links[idx]
	if !ok {
		return
	}
	delete(s.links, idx)
	if s.names[l.Name] == idx {
		delete(s.names, l.Name)
	}
	if c := s.children[l.ParentIndex]; c != nil {
		delete(c, idx)
		if len(c) == 0 {
			delete(s.children, l.ParentIndex)
		}
	}
}

func (s *kept) putAddr(a kernel.Addr) {
	as := s.addrs[a.LinkIndex]
	if as == nil {
		as = map[netip.Prefix]struct{}{}
		s.addrs[a.LinkIndex] = as
	}
	as[a.Prefix] = struct{}{}
	indexAddr(s.bySubnet, a.Prefix.Masked(), a)
	indexAddr(s.byBucket, bucketOf(a.Prefix.Addr()), a)
}

func (s *kept) dropAddr(a kernel.Addr) {
	as := s.addrs[a.LinkIndex]
	if _, ok := as[a.Prefix]; !ok {
		return
	}
	delete(as, a.Prefix)
	if len(as) == 0 {
		delete(s.addrs, a.LinkIndex)
	}
	unindexAddr(s.bySubnet, a.Prefix.Masked(), a)
	unindexAddr(s.byBucket, bucketOf(a.Prefix.Addr()), a)
}

func indexAddr(m map[netip.Prefix]map[kernel.Addr]struct{}, key netip.Prefix, a kernel.Addr) {
	set := m[key]
	if set == nil {
		set = map[kernel.Addr]struct{}{}
		m[key] = set
	}
	set[a] = struct{}{}
}

func unindexAddr(m map[netip.Prefix]map[kernel.Addr]struct{}, key netip.Prefix, a kernel.Addr) {
	if set := m[key]; set != nil {
		delete(set, a)
		if len(set) == 0 {
			delete(m, key)
		}
	}
}

// bucketOf is the /24 (IPv4) or /64 (IPv6) an address is in.
func bucketOf(a netip.Addr) netip.Prefix {
	bits := 24
	if a.Is6() {
		bits = 64
	}
	p, _ := a.Prefix(bits)
	return p
}

// near returns the addresses whose subnet overlaps pool: those whose
// subnet holds the pool (one lookup per prefix length up to the pool's),
// and those in the pool (its /24s or /64s, or every bucket when there are
// fewer). Neither grows with the host's addresses elsewhere.
func (s *kept) near(pool netip.Prefix) []kernel.Addr {
	pool = pool.Masked()
	seen := map[kernel.Addr]struct{}{}
	var out []kernel.Addr
	add := func(set map[kernel.Addr]struct{}) {
		for a := range set {
			if _, dup := seen[a]; !dup && a.Prefix.Masked().Overlaps(pool) {
				seen[a] = struct{}{}
				out = append(out, a)
			}
		}
	}
	for bits := 0; bits <= pool.Bits(); bits++ {
		p, _ := pool.Addr().Prefix(bits)
		add(s.bySubnet[p])
	}
	bucket := 24
	if pool.Addr().Is6() {
		bucket = 64
	}
	switch spread := bucket - pool.Bits(); {
	case spread <= 0:
		add(s.byBucket[bucketOf(pool.Addr())])
	case spread < 20 && 1<<spread <= len(s.byBucket):
		a := pool.Addr()
		for range 1 << spread {
			add(s.byBucket[bucketOf(a)])
			a = nextBucket(a, bucket)
		}
	default:
		for key, set := range s.byBucket {
			if key.Overlaps(pool) {
				add(set)
			}
		}
	}
	sortAddrs(out)
	return out
}

// sortAddrs orders addresses as a dump lists them: by link, then address.
func sortAddrs(as []kernel.Addr) {
	slices.SortFunc(as, func(a, b kernel.Addr) int {
		if a.LinkIndex != b.LinkIndex {
			return a.LinkIndex - b.LinkIndex
		}
		if c := a.Prefix.Addr().Compare(b.Prefix.Addr()); c != 0 {
			return c
		}
		return a.Prefix.Bits() - b.Prefix.Bits()
	})
}

// nextBucket is the first address of the /bits after a's.
func nextBucket(a netip.Addr, bits int) netip.Addr {
	b := a.AsSlice()
	i := bits/8 - 1
	for ; i >= 0; i-- {
		b[i]++
		if b[i] != 0 {
			break
		}
	}
	out, _ := netip.AddrFromSlice(b)
	return out
}

func (s *kept) putRoute(id routeID, rs []kernel.Route) {
	if len(rs) == 0 {
		return
	}
	s.dropRoute(id)
	s.routes[id] = rs
	for _, r := range rs {
		m := s.byLink[r.LinkIndex]
		if m == nil {
			m = map[routeID]struct{}{}
			s.byLink[r.LinkIndex] = m
		}
		m[id] = struct{}{}
	}
}

func (s *kept) dropRoute(id routeID) {
	rs, ok := s.routes[id]
	if !ok {
		return
	}
	delete(s.routes, id)
	for _, r := range rs {
		if m := s.byLink[r.LinkIndex]; m != nil {
			delete(m, id)
			if len(m) == 0 {
				delete(s.byLink, r.LinkIndex)
			}
		}
	}
}

// routeOf converts a route of a dump.
func routeOf(r netlink.Route) (routeID, []kernel.Route) {
	dst, ok := prefixOf(r.Dst, true)
	if !ok {
		dst = netip.PrefixFrom(netip.IPv4Unspecified(), 0)
		if r.Family == unix.AF_INET6 {
			dst = netip.PrefixFrom(netip.IPv6Unspecified(), 0)
		}
	}
	src, _ := netip.AddrFromSlice(r.Src)
	id := routeID{family: uint8(r.Family), table: r.Table, dst: dst, tos: uint8(r.Tos), prio: r.Priority, typ: uint8(r.Type), scope: uint8(r.Scope),
		proto: uint8(r.Protocol), src: src.Unmap()}
	if len(r.MultiPath) == 0 {
		gw, _ := netip.AddrFromSlice(r.Gw)
		id.oif, id.gw = r.LinkIndex, gw.Unmap()
		return id, []kernel.Route{{Dst: dst, Gateway: id.gw, LinkIndex: r.LinkIndex, Table: r.Table, Priority: r.Priority}}
	}
	out := make([]kernel.Route, 0, len(r.MultiPath))
	for _, nh := range r.MultiPath {
		gw, _ := netip.AddrFromSlice(nh.Gw)
		out = append(out, kernel.Route{Dst: dst, Gateway: gw.Unmap(), LinkIndex: nh.LinkIndex, Table: r.Table, Priority: r.Priority})
	}
	return id, out
}

// parseRoute reads a route event as a dump would have listed it; cloned
// routes (the kernel's cache, which dumps leave out) are not routes.
func parseRoute(b []byte) (id routeID, out []kernel.Route, multipath, ok bool) {
	if len(b) < unix.SizeofRtMsg {
		return routeID{}, nil, false, false
	}
	msg := nl.DeserializeRtMsg(b)
	if msg.Flags&unix.RTM_F_CLONED != 0 || (msg.Family != unix.AF_INET && msg.Family != unix.AF_INET6) {
		return routeID{}, nil, false, false
	}
	attrs, err := nl.ParseRouteAttr(b[msg.Len():])
	if err != nil {
		return routeID{}, nil, false, false
	}
	r := netlink.Route{Family: int(msg.Family), Table: int(msg.Table), Tos: int(msg.Tos), Type: int(msg.Type), Scope: netlink.Scope(msg.Scope), Protocol: netlink.RouteProtocol(msg.Protocol)}
	for _, a := range attrs {
		switch a.Attr.Type {
		case unix.RTA_DST:
			r.Dst = &net.IPNet{IP: net.IP(a.Value), Mask: net.CIDRMask(int(msg.Dst_len), 8*len(a.Value))}
		case unix.RTA_GATEWAY:
			r.Gw = net.IP(a.Value)
		case unix.RTA_PREFSRC:
			r.Src = net.IP(a.Value)
		case unix.RTA_OIF:
			if len(a.Value) >= 4 {
				r.LinkIndex = int(nl.NativeEndian().Uint32(a.Value))
			}
		case unix.RTA_PRIORITY:
			if len(a.Value) >= 4 {
				r.Priority = int(nl.NativeEndian().Uint32(a.Value))
			}
		case unix.RTA_TABLE:
			if len(a.Value) >= 4 {
				r.Table = int(nl.NativeEndian().Uint32(a.Value))
			}
		case unix.RTA_MULTIPATH:
			r.MultiPath = nexthopsOf(a.Value)
		}
	}
	id, out = routeOf(r)
	return id, out, len(r.MultiPath) > 0, true
}

// nexthopsOf reads RTA_MULTIPATH: rtnexthop headers, each followed by its
// attributes (RTA_GATEWAY).
func nexthopsOf(b []byte) []*netlink.NexthopInfo {
	var out []*netlink.NexthopInfo
	for len(b) >= unix.SizeofRtNexthop {
		nh := nl.DeserializeRtNexthop(b)
		l := int(nh.RtNexthop.Len)
		if l < unix.SizeofRtNexthop || l > len(b) {
			break
		}
		info := &netlink.NexthopInfo{LinkIndex: int(nh.RtNexthop.Ifindex)}
		if attrs, err := nl.ParseRouteAttr(b[unix.SizeofRtNexthop:l]); err == nil {
			for _, a := range attrs {
				if a.Attr.Type == unix.RTA_GATEWAY {
					info.Gw = net.IP(a.Value)
				}
			}
		}
		out = append(out, info)
		next := (l + unix.RTNH_ALIGNTO - 1) &^ (unix.RTNH_ALIGNTO - 1)
		if next >= len(b) {
			break
		}
		b = b[next:]
	}
	return out
}

// addrOf reads an address event as Addrs lists it (IFA_LOCAL, the
// address itself, before IFA_ADDRESS, a point-to-point peer's).
func addrOf(b []byte) (kernel.Addr, bool) {
	if len(b) < unix.SizeofIfAddrmsg {
		return kernel.Addr{}, false
	}
	msg := nl.DeserializeIfAddrmsg(b)
	attrs, err := nl.ParseRouteAttr(b[msg.Len():])
	if err != nil {
		return kernel.Addr{}, false
	}
	var local, address []byte
	for _, a := range attrs {
		switch a.Attr.Type {
		case unix.IFA_LOCAL:
			local = a.Value
		case unix.IFA_ADDRESS:
			address = a.Value
		}
	}
	if local == nil {
		local = address
	}
	ip, ok := netip.AddrFromSlice(local)
	if !ok {
		return kernel.Addr{}, false
	}
	p, err := ip.Unmap().Prefix(int(msg.Prefixlen))
	if err != nil {
		return kernel.Addr{}, false
	}
	return kernel.Addr{Prefix: netip.PrefixFrom(ip.Unmap(), p.Bits()), LinkIndex: int(msg.Index)}, true
}

// The reads, answered from the kept state.

func (s *kept) byIndex(ctx context.Context, idx int) (kernel.Link, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.sync(ctx); err != nil {
		return kernel.Link{}, false, err
	}
	l, ok := s.links[idx]
	return l, ok, nil
}

func (s *kept) byName(ctx context.Context, name string) (kernel.Link, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.sync(ctx); err != nil {
		return kernel.Link{}, false, err
	}
	idx, ok := s.names[name]
	return s.links[idx], ok, nil
}

func (s *kept) on(ctx context.Context, parent int) ([]kernel.Link, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.sync(ctx); err != nil {
		return nil, err
	}
	out := make([]kernel.Link, 0, len(s.children[parent]))
	for idx := range s.children[parent] {
		out = append(out, s.links[idx])
	}
	slices.SortFunc(out, func(a, b kernel.Link) int { return a.Index - b.Index })
	return out, nil
}

func (s *kept) addrsNear(ctx context.Context, pool netip.Prefix) ([]kernel.Addr, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.sync(ctx); err != nil {
		return nil, err
	}
	return s.near(pool), nil
}

func (s *kept) routesVia(ctx context.Context, idx int) ([]kernel.Route, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.sync(ctx); err != nil {
		return nil, err
	}
	var out []kernel.Route
	for id := range s.byLink[idx] {
		for _, r := range s.routes[id] {
			if r.LinkIndex == idx {
				out = append(out, r)
			}
		}
	}
	return out, nil
}
