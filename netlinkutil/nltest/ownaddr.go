package nltest

import (
	"context"
	"net/netip"
)

// AddHostAddr gives the link name addr as one of the host's own addresses
// (OwnAddr finds it; LinkAddrs lists it).
func (k *Kernel) AddHostAddr(name string, addr netip.Addr) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.addrs[name] = append(k.addrs[name], addr)
}

// OwnAddr implements netlinkutil.Links: an address of any link, the
// scope's first for a link-local one (op "ownaddr", the address as the
// name, for SetFault).
func (k *Kernel) OwnAddr(_ context.Context, addr netip.Addr, scope int) (string, bool, error) {
	if err := k.begin("ownaddr", addr.String()); err != nil {
		return "", false, err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	link, own := "", false
	for name, as := range k.addrs {
		for _, a := range as {
			if a != addr.Unmap() {
				continue
			}
			l := k.links[name]
			if addr.Is6() && addr.IsLinkLocalUnicast() && (l == nil || l.Index != scope) {
				continue
			}
			if !own || (l != nil && l.Index == scope) {
				link, own = name, true
			}
		}
	}
	return link, own, nil
}
