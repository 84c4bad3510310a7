package keylock

import (
	"context"

	"github.com/underlay-net/underlay/internal/pluginapi"
	"github.com/underlay-net/underlay/store"
	"github.com/underlay-net/underlay/store/record"
)

// Endpoint takes the network shared and the endpoint exclusively, then
// reads both records under them (n nil when the network is unknown, ep
// nil when the endpoint is): what an endpoint request and a lease
// renewal both start with. The context returned records the locks (pass
// it on: a later lock must be of a later rank).
func (l *Locker) Endpoint(ctx context.Context, st store.Viewer, netID, epID string) (locked context.Context, unlock func(), n *record.Network, ep *record.Endpoint, err error) {
	if netID == "" || epID == "" {
		return ctx, nil, nil, nil, pluginapi.Invalidf("request without NetworkID or EndpointID")
	}
	locked, unlock, err = l.Acquire(ctx, Shared(NetworkKey(netID)), Exclusive(EndpointKey(epID)))
	if err != nil {
		return ctx, nil, nil, nil, err
	}
	err = st.View(func(tx *store.Tx) error {
		nv, ok, err := tx.Network(netID)
		if err != nil || !ok {
			return err
		}
		n = &nv
		ev, ok, err := tx.Endpoint(netID, epID)
		if ok {
			ep = &ev
		}
		return err
	})
	if err != nil {
		unlock()
		return ctx, nil, nil, nil, err
	}
	return locked, unlock, n, ep, nil
}

// Parents takes parent links' locks shared, waiting for them: a lost
// lease's block is made under its parent's lock, so that following a
// renamed owned VLAN (which holds the old and new names exclusive while it
// moves the networks and blocks on it) comes wholly before or after it.
func (l *Locker) Parents(ctx context.Context, names ...string) (func(), error) {
	reqs := make([]Req, 0, len(names))
	for _, name := range names {
		reqs = append(reqs, Shared(ParentKey(name)))
	}
	_, unlock, err := l.Acquire(ctx, reqs...)
	return unlock, err
}
