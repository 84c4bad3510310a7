package leases

import (
	"context"

	"github.com/underlay-net/underlay/store/record"
)

// Forget is what an endpoint's going (or a create that does not record
// it) does with its lease: it is no longer renewed; a held one is given
// back and, once it is, forgotten in the journal (whose entry otherwise
// has it released at the next start); a lost one is not the daemon's to
// give back, and its block goes. A DHCP lease is released within the
// request (dhcp_timeout), a DHCPv6 one in the background (its Release
// waits up to about 16 s for a silent server, which neither
// DeleteEndpoint nor DeleteNetwork, their locks held, should; a shutdown
// ends it).
func (ls *Leaser[L, R]) Forget(ctx context.Context, n record.Network, ep record.Endpoint) {
	ls.timers.Drop(Key{n.ID, ep.ID})
	l := ls.Family.Of(ep)
	switch {
	case l == nil:
	case !ls.Family.Facts(*l).Lost.IsZero():
		ls.unblock(ctx, n, ep, *l)
	case !ls.Family.HasClient():
	case !ls.Family.Words().Background:
		ctx, cancel := context.WithTimeout(ctx, n.Config.DHCP.Timeout)
		defer cancel()
		ls.release(ctx, n, ep, *l)
	default:
		ls.timers.Go(func() {
			ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
			defer cancel()
			go func() {
				select {
				case <-ls.stop:
					cancel()
				case <-ctx.Done():
				}
			}()
			ls.release(ctx, n, ep, *l)
		})
	}
}

// release gives an endpoint's held lease back and forgets it in the
// journal; false when it could not (logged).
func (ls *Leaser[L, R]) release(ctx context.Context, n record.Network, ep record.Endpoint, l L) bool {
	w := ls.Family.Words()
	r, err := ls.RequestOf(ctx, n, ep)
	if err == nil {
		err = ls.Family.Release(ctx, r, l)
	}
	if err != nil {
		ls.log.Warn(w.NoRelease, "network", n.ID, "endpoint", ep.ID, "address", ls.Family.Facts(l).Text, "error", err)
		return false
	}
	ls.Unjournal(n, ep)
	ls.log.Info(w.Released, "network", n.ID, "endpoint", ep.ID, "address", ls.Family.Facts(l).Text)
	return true
}
