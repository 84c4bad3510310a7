package driver

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"time"

	"github.com/underlay-net/underlay/driver/internal/plan"
	"github.com/underlay-net/underlay/driver/internal/reconcile"
	"github.com/underlay-net/underlay/netlinkutil"
	"github.com/underlay-net/underlay/store"
	"github.com/underlay-net/underlay/store/record"
)

// Container-side repair, the driver's part: after a Join, the endpoint's
// interface is read in its container once libnetwork has plumbed it (its
// name there, MTU, the parent it stands on, the namespace), and kept in
// its record with the join; the repair passes (driver/internal/reconcile,
// containers.go) make it again from that record when its parent link was
// deleted and made again.

// DefaultContainerRepairWait is how long the repair waits for a deleted
// parent link to come back before it leaves the containers on it as they
// are.
const DefaultContainerRepairWait = 5 * time.Minute

// sandboxes reaches into containers' namespaces (netlinkutil.Kernel).
type sandboxes interface {
	reconcile.Sandboxes
	SandboxInterface(ctx context.Context, path, mac string, addr netip.Addr) (netlinkutil.SandboxID, netlinkutil.SandboxLink, error)
}

// Reading a joined endpoint's interface: libnetwork moves the link into
// the container, renames it, sets its addresses and brings it up after
// the Join's answer (engine 20.10 about 240 ms after it; its namespace's
// path does not exist before). The read polls until the link is up under
// its new name, within readWait.
const (
	readWait  = 10 * time.Second
	readEvery = 50 * time.Millisecond
	routeWait = time.Second
)

// readInterface reads, in the background, the interface of the endpoint
// ep of n just joined to sandbox in this boot, and keeps it in the
// endpoint's record (joins.Table.Plumbed) unless the endpoint left or
// joined again meanwhile.
func (d *Driver) readInterface(n record.Network, ep record.Endpoint, sandbox string) {
	if d.sandboxes == nil || sandbox == "" {
		return
	}
	var addr netip.Addr
	for _, s := range []string{ep.IPv4, ep.IPv6} {
		if p, err := netip.ParsePrefix(s); err == nil && !addr.IsValid() {
			addr = p.Addr()
		}
	}
	// Leave, DeleteEndpoint and Close end the read (d.reads), and a Join
	// again starts it anew.
	d.reads.Start(ep.ID, func(run context.Context) {
		ctx, cancel := context.WithTimeout(run, readWait)
		defer cancel()
		log := d.log.With("network", n.ID, "endpoint", ep.ID, "sandbox", sandbox)
		tick := time.NewTicker(readEvery)
		defer tick.Stop()
		// libnetwork sets the gateway after the link is up, and only for
		// the container's gateway endpoint: a default route is waited
		// for a moment (routeWait) where the Join answered one.
		j := plan.JoinAnswer(n, ep)
		gateway := j.Gateway != "" || j.GatewayIPv6 != ""
		for _, r := range j.StaticRoutes {
			gateway = gateway || r.Destination == "0.0.0.0/0" || r.Destination == "::/0"
		}
		var lastErr error
		var up time.Time
		for run.Err() == nil { // not once more after Leave, DeleteEndpoint or Close
			id, l, err := d.sandboxes.SandboxInterface(ctx, d.reconcile.SandboxPath(sandbox), ep.MAC, addr)
			if err == nil && l.Up && l.Name != ep.Link {
				if up.IsZero() {
					up = time.Now()
				}
				if !gateway || l.Default4 || l.Default6 || time.Since(up) >= routeWait {
					d.keepInterface(ctx, n, ep, sandbox, record.Plumb{IfName: l.Name, MTU: l.MTU, ParentIndex: l.ParentIndex,
						NetnsDev: id.Dev, NetnsIno: id.Ino, Default4: l.Default4, Default6: l.Default6}, log)
					return
				}
			}
			if err != nil {
				lastErr = err
			}
			select {
			case <-ctx.Done():
				if run.Err() != nil || !d.stillJoined(n.ID, ep.ID, sandbox) {
					return // the endpoint left or went, or the daemon closes
				}
				// Not fatal for the container: only its repair is off.
				// Said once at WARN (a managed plugin that cannot see the
				// path would say it at every Join), then at DEBUG.
				level := slog.LevelDebug
				if d.readFailed.CompareAndSwap(false, true) {
					level = slog.LevelWarn
				}
				log.Log(context.Background(), level, "could not read a joined endpoint's interface in its container: it will not be made again if its parent link is deleted",
					"error", lastErr, "hint", readHint(lastErr))
				return
			case <-tick.C:
			}
		}
	})
}

// readHint says what a failed read of an interface in its container
// usually means.
func readHint(err error) string {
	switch {
	case errors.Is(err, netlinkutil.ErrSandboxGone):
		return "the container stopped at once, or its namespace's file is not visible to this daemon: in the repair plugin, /run must be a shared mount (as systemd makes it) and SANDBOX_DIR dockerd's <exec-root>/netns as the plugin sees it; see docs/networks.md, Containers' interfaces"
	case err == nil:
		return "the interface did not come up in the container in time"
	}
	return ""
}

// stillJoined reports whether the endpoint is joined to sandbox still.
func (d *Driver) stillJoined(netID, epID, sandbox string) bool {
	var ep record.Endpoint
	var ok bool
	if err := d.store.View(func(tx *store.Tx) (err error) {
		ep, ok, err = tx.Endpoint(netID, epID)
		return err
	}); err != nil || !ok {
		return false
	}
	return d.joins.Overlay(ep).Sandbox == sandbox
}

// keepInterface commits what was read of ep's interface, under the
// endpoint's lock, to its record as it is then.
func (d *Driver) keepInterface(ctx context.Context, n record.Network, ep record.Endpoint, sandbox string, p record.Plumb, log interface{ Warn(string, ...any) }) {
	_, unlock, cur, now, err := d.locks.Endpoint(ctx, d.store, n.ID, ep.ID)
	if err != nil {
		return // closing, or a request held it past readWait
	}
	defer unlock()
	if cur == nil || now == nil {
		return
	}
	commit := d.joins.Plumbed(*now, sandbox, d.boot, p)
	if commit == nil {
		return // it left, or joined again, meanwhile
	}
	if err := d.store.Batch(commit); err != nil {
		log.Warn("could not record a joined endpoint's interface in its container: it will not be made again if its parent link is deleted", "error", err)
		return
	}
	d.reconcile.WatchParent(cur.Parent, p.ParentIndex)
	d.log.Debug("read a joined endpoint's interface in its container", "network", n.ID, "endpoint", ep.ID, "interface", p.IfName, "parent_index", p.ParentIndex)
}
