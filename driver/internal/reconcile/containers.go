package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"path/filepath"
	"sync"
	"time"

	"github.com/underlay-net/underlay/driver/internal/config"
	"github.com/underlay-net/underlay/driver/internal/plan"
	"github.com/underlay-net/underlay/netlinkutil"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/underlay-net/underlay/store"
	"github.com/underlay-net/underlay/store/record"
)

// Container-side repair (plan.PlanContainers): each repair pass also
// looks at the joined endpoints whose interface was read in their
// container, and makes an interface again where its parent link was made
// again, under the endpoint's lock, in the namespace it was read in only.

// Sandboxes makes endpoints' interfaces again inside containers
// (netlinkutil.Kernel).
type Sandboxes interface {
	Replumb(ctx context.Context, r netlinkutil.Replumb) error
}

// ContainerRepair results, as Events.ContainerRepair is told them.
const (
	ContainerRepaired  = "repaired"  // made again in its container
	ContainerFailed    = "failed"    // could not be made on the parent as it came back
	ContainerGone      = "gone"      // the container's namespace is gone: left alone
	ContainerAbandoned = "abandoned" // the parent did not come back in time
)

// containers is the repair's memory between passes: what each lost
// endpoint's last pass found (plan.Lost), and the links the joined
// endpoints stand on (the link events worth a pass).
type containers struct {
	mu      sync.Mutex
	lost    map[string]plan.Lost
	parents map[string]bool
	// added are the parents WatchParent added since the last pass ended:
	// a pass that read its endpoints before their commit keeps them.
	added map[string]bool
	// said is, by endpoint, the last failure logged at WARN: the same
	// again (a flapping parent) is logged at DEBUG.
	said map[string]string
}

// warnOnce logs a container's failure at WARN unless it is the one last
// logged for that endpoint.
func (c *containers) warnOnce(log *slog.Logger, epID, msg string, err error, args ...any) {
	key := msg // the same failure: the message and the error (not why: a parent's index changes at each flap)
	if err != nil {
		key += ": " + err.Error()
		args = append(args, "error", err)
	}
	c.mu.Lock()
	again := c.said[epID] == key
	if c.said == nil {
		c.said = map[string]string{}
	}
	c.said[epID] = key
	c.mu.Unlock()
	level := slog.LevelWarn
	if again {
		level = slog.LevelDebug
	}
	log.Log(context.Background(), level, msg, args...)
}

// forget drops what was logged of an endpoint's failures.
func (c *containers) forget(epID string) {
	c.mu.Lock()
	delete(c.said, epID)
	c.mu.Unlock()
}

// Watches reports whether a joined endpoint's interface stands on a link
// of that name (the repair pass and the driver's reading after a Join
// say so).
func (x *Executor) Watches(name string) bool {
	x.containers.mu.Lock()
	defer x.containers.mu.Unlock()
	return x.containers.parents[name]
}

// WatchParent adds a link joined endpoints stand on, the link of that
// name whose index a container's interface was read on. What the watcher
// kept of a link of that name with another index is forgotten: its next
// event is a pass's business (the parent may have been made again since
// the pass that read the endpoints, before this one was recorded).
func (x *Executor) WatchParent(name string, index int) {
	x.containers.mu.Lock()
	if x.containers.parents == nil {
		x.containers.parents = map[string]bool{}
	}
	if x.containers.added == nil {
		x.containers.added = map[string]bool{}
	}
	x.containers.parents[name], x.containers.added[name] = true, true
	x.containers.mu.Unlock()
	x.seen.forget(func(l kernel.Link) bool { return l.Name == name && l.Index != index })
}

// ContainerRepairOn reports whether the executor repairs containers'
// interfaces.
func (x *Executor) ContainerRepairOn() bool { return x.Sandboxes != nil && x.ContainerWait > 0 }

// repairContainers is a repair pass's part for containers: it returns
// busy when an endpoint's lock was taken (tried again shortly) and when
// the first missing parent is given up.
func (x *Executor) repairContainers(ctx context.Context, links []kernel.Link) (busy bool, next time.Time, err error) {
	if !x.ContainerRepairOn() {
		return false, time.Time{}, nil
	}
	eps, err := x.readPlumbed()
	if err != nil {
		return false, time.Time{}, fmt.Errorf("read the joined endpoints: %w", err)
	}
	x.containers.mu.Lock()
	lost := x.containers.lost
	x.containers.mu.Unlock()
	p := plan.PlanContainers(eps, links, lost, x.Boot, x.Now(), x.ContainerWait)
	remember := p.Remember
	for _, st := range p.Steps {
		log := x.Log.With("network", st.Container.Network.ID, "endpoint", st.Container.Endpoint.ID,
			"parent", st.Container.Network.Parent, "sandbox", st.Container.Endpoint.Sandbox)
		switch st.Op {
		case plan.OpAbandon:
			log.Warn("a container's interface stays gone: its parent link did not come back in time; once the parent is back, restart the container (docker restart) to give it its network again",
				"why", st.Why, "waited", x.ContainerWait)
			remember[st.Name] = plan.Lost{GaveUp: true}
			x.Events.ContainerRepair(ContainerAbandoned)
		case plan.OpContainer:
			result, ran := x.repairContainer(ctx, st, log)
			switch {
			case !ran:
				busy = true
			case result == ContainerGone:
				remember[st.Name] = plan.Lost{GaveUp: true}
			case result == ContainerFailed:
				remember[st.Name] = plan.Lost{Failed: plan.Attempt(st.Link)}
			}
			if ran {
				x.Events.ContainerRepair(result)
			}
		}
	}
	x.containers.mu.Lock()
	for name := range x.containers.added {
		p.Parents[name] = true
	}
	x.containers.lost, x.containers.parents, x.containers.added = remember, p.Parents, nil
	for id := range x.containers.said {
		if _, ok := remember[id]; !ok {
			delete(x.containers.said, id) // it left, or is whole again
		}
	}
	x.containers.mu.Unlock()
	return busy, p.Next, nil
}

// repairLockWait bounds how long a repair waits for an endpoint's lock (a
// request on it: Leave, DeleteEndpoint).
const repairLockWait = 2 * time.Second

// repairContainer carries out one OpContainer step under the endpoint's
// lock, on its record as it is then; ran is false when the lock stayed
// taken.
func (x *Executor) repairContainer(ctx context.Context, st plan.Step, log *slog.Logger) (result string, ran bool) {
	was := st.Container.Endpoint
	lctx, cancel := context.WithTimeout(ctx, repairLockWait)
	defer cancel()
	_, unlock, n, ep, err := x.Locks.Endpoint(lctx, x.Store, was.NetworkID, was.ID)
	if err != nil {
		return "", false
	}
	defer unlock()
	if n == nil || ep == nil || ep.Plumb == nil || ep.Sandbox != was.Sandbox || ep.Plumb.ParentIndex != was.Plumb.ParentIndex {
		return "", true // it left, or was repaired, meanwhile: nothing to count
	}
	warn := func(msg string, err error, args ...any) { x.containers.warnOnce(log, ep.ID, msg, err, args...) }
	if st.Problem != "" {
		warn("a container's interface could not be made again: "+st.Problem, nil, "why", st.Why, "container_interface", ep.Plumb.IfName)
		return ContainerFailed, true
	}
	r := ReplumbOf(*n, *ep, x.Mark)
	r.Path = x.SandboxPath(ep.Sandbox)
	err = x.Sandboxes.Replumb(ctx, r)
	switch {
	case errors.Is(err, netlinkutil.ErrSandboxGone):
		warn("a container's interface was not made again: its namespace is no longer the container's (it stopped, or the path names another namespace); left alone", err, "why", st.Why)
		return ContainerGone, true
	case errors.Is(err, netlinkutil.ErrIfNameTaken):
		warn("a container's interface was not made again: the container has a link of its name; left alone (nothing there is underlay's to replace)", err, "why", st.Why)
		return ContainerFailed, true
	case err != nil:
		warn("a container's interface could not be made again; tried again when its parent link changes", err, "why", st.Why)
		return ContainerFailed, true
	}
	x.containers.forget(ep.ID)
	done := *ep
	plumb := *ep.Plumb
	plumb.ParentIndex, plumb.Repairs = st.Link.Index, plumb.Repairs+1
	done.Plumb = &plumb
	if err := x.Store.Update(func(tx *store.Tx) error { return tx.PutEndpoint(done) }); err != nil {
		// The interface is back; the next pass finds it again on the
		// old index and, finding its name taken, leaves it.
		log.Warn("a container's interface was made again but its record could not be updated", "error", err)
	}
	log.Warn("made a container's interface again after its parent link came back", "why", st.Why,
		"container_interface", ep.Plumb.IfName, "mac", ep.MAC, "addresses", r.Addrs, "repairs", plumb.Repairs)
	if x.LAN != nil {
		x.LAN.Announce(context.WithoutCancel(ctx), *n, done)
	}
	return ContainerRepaired, true
}

// SandboxPath is where this process opens the namespace a Join's
// SandboxKey names: the key itself, or its file name in SandboxDir.
func (x *Executor) SandboxPath(key string) string {
	if x.SandboxDir == "" {
		return key
	}
	base := filepath.Base(key)
	if base == "." || base == ".." || base == string(filepath.Separator) {
		base = ".invalid-sandbox-key" // no such file: the read fails as for a gone namespace
	}
	return filepath.Join(x.SandboxDir, base)
}

// ReplumbOf is the interface an endpoint's Join gave its container, to be
// made again: its name and MTU there as read, its MAC, its addresses, and
// the gateways and routes the Join answered.
func ReplumbOf(n record.Network, ep record.Endpoint, mark string) netlinkutil.Replumb {
	r := netlinkutil.Replumb{
		Path:    ep.Sandbox,
		Sandbox: netlinkutil.SandboxID{Dev: ep.Plumb.NetnsDev, Ino: ep.Plumb.NetnsIno},
		Link: kernel.Endpoint{Name: ep.Plumb.IfName, Parent: n.Parent, Type: n.Type, Mode: n.Mode, Flag: n.Flag,
			MTU: ep.Plumb.MTU, MAC: ep.MAC, Mark: mark},
		IPv6: ep.IPv6 != "" || n.Config.IPv6Mode == config.IPv6SLAAC || config.Leases6(n.Config),
	}
	for _, s := range []string{ep.IPv4, ep.IPv6} {
		if p, err := netip.ParsePrefix(s); err == nil {
			r.Addrs = append(r.Addrs, p)
		}
	}
	j := plan.JoinAnswer(n, ep)
	// A default route only where the container's went through it (the
	// container's gateway endpoint; libnetwork sets no other's).
	through := func(a netip.Addr) bool { return (a.Is4() && ep.Plumb.Default4) || (a.Is6() && ep.Plumb.Default6) }
	for _, g := range []string{j.Gateway, j.GatewayIPv6} {
		if a, err := netip.ParseAddr(g); err == nil && through(a) {
			r.Gateways = append(r.Gateways, a)
		}
	}
	for _, sr := range j.StaticRoutes {
		dst, err := netip.ParsePrefix(sr.Destination)
		if err != nil || (dst.Bits() == 0 && !through(dst.Addr())) {
			continue
		}
		rt := netlinkutil.SandboxRoute{Dst: dst}
		if sr.RouteType != 1 {
			if rt.Via, err = netip.ParseAddr(sr.NextHop); err != nil {
				continue
			}
		}
		r.Routes = append(r.Routes, rt)
	}
	return r
}

// readPlumbed reads every endpoint whose interface was read in its
// container, with its network.
func (x *Executor) readPlumbed() ([]plan.Plumbed, error) {
	var out []plan.Plumbed
	err := x.Store.View(func(tx *store.Tx) error {
		return tx.ForEachNetwork(func(n record.Network) error {
			eps, err := tx.Endpoints(n.ID)
			for _, ep := range eps {
				if ep.Plumb != nil {
					out = append(out, plan.Plumbed{Network: n, Endpoint: ep})
				}
			}
			return err
		})
	})
	return out, err
}
