// Package driver owns underlay's behaviour as a libnetwork remote
// NetworkDriver: it parses requests, decides what CreateNetwork must do
// with the networks already on a parent (reuse, replace, refuse, coexist),
// drives the kernel through netlinkutil and records everything in store.
//
// The decisions are pure functions (driver/internal/plan, over the configuration of driver/internal/config) over a
// snapshot of the store; the kernel, the store and Docker sit behind narrow
// interfaces, and one keyed lock mechanism (driver/internal/keylock)
// serializes requests per network, endpoint and parent link. Carrying out
// the planners' plans (restore, janitor, live repair) is
// driver/internal/reconcile's, the operator's view and repairs
// driver/internal/reconcile's, the effects on owned links both share
// driver/internal/links's.
package driver

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/underlay-net/underlay/dhcp"
	"github.com/underlay-net/underlay/driver/internal/joins"
	"github.com/underlay-net/underlay/driver/internal/keylock"
	"github.com/underlay-net/underlay/driver/internal/lan"
	"github.com/underlay-net/underlay/driver/internal/leases"
	"github.com/underlay-net/underlay/driver/internal/links"
	"github.com/underlay-net/underlay/driver/internal/reconcile"
	"github.com/underlay-net/underlay/driver/internal/runs"
	"github.com/underlay-net/underlay/netlinkutil"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/underlay-net/underlay/store"
)

// Store is the state as the driver uses it; *store.DB implements it.
type Store interface {
	View(func(*store.Tx) error) error
	Update(func(*store.Tx) error) error
	Batch(func(*store.Tx) error) error
}

// Config is what a Driver is made of.
type Config struct {
	Store Store
	Links netlinkutil.Links
	// DHCP leases addresses for the endpoints of dhcp=true networks; nil
	// refuses such networks.
	DHCP *dhcp.Client
	// DHCPv6 leases IPv6 addresses for the endpoints of
	// ipv6_mode=dhcpv6 networks; nil refuses their endpoints.
	DHCPv6 leases.Client6
	// Routes lists the host's routes, which parent=auto picks a link by;
	// nil refuses parent=auto.
	Routes lan.RouteLister
	// Docker is asked whether conflicting holders still exist; nil means
	// every holder is treated as live.
	Docker NetworkChecker
	// StaleGrace is how old a holder must be before Docker's "no such
	// network" is believed: libnetwork stores a network only after the
	// driver answered its CreateNetwork. Zero means 3 seconds.
	StaleGrace time.Duration
	// LookupTimeout bounds the time the stale-holder check waits on Docker
	// (besides the grace wait); zero means 2 seconds, the Docker client's
	// own per-lookup timeout in serve.
	LookupTimeout time.Duration
	// Instance is the ID of the state file (store.DB.InstanceID): every link
	// the driver creates is marked with it, and only links carrying it are
	// ever deleted as strays.
	Instance string
	// BootID identifies this boot of the host (/proc/sys/kernel/random/
	// boot_id): a join recorded in another boot is over, its sandbox gone.
	BootID string
	// Scope is "local" or "global" (GetCapabilities).
	Scope string
	// PendingTimeout is how long a network may stay half-created before
	// it is rolled back; zero means 60 seconds.
	PendingTimeout time.Duration
	Logger         *slog.Logger
	// CrashPoint, when set, is called at every named step (see
	// CrashPoints) so tests can kill the process there.
	CrashPoint func(name string)
	// Events is told what the driver did besides answering (metrics); nil
	// means no one is told.
	Events Events
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Prober probes endpoints' addresses on the LAN before they are
	// answered (address_probe); nil probes nothing.
	Prober lan.Prober
	// LANCheck runs the LAN preflight of a network created anew, in the
	// background within LANCheckTimeout (lanpreflight.go); nil runs none.
	LANCheck LANChecker
	// ContainerRepairWait is how long the container-side repair waits for
	// a deleted parent link to come back (containers.go); zero means 5
	// minutes, a negative value turns the repair off. It needs a Links
	// that reaches into containers (netlinkutil.Kernel).
	ContainerRepairWait time.Duration
	// SandboxDir, when set, is where this process finds the files of
	// containers' network namespaces: a Join's SandboxKey is opened there
	// by its file name (a managed plugin's mount of dockerd's
	// <exec-root>/netns); "" opens the SandboxKey as it is.
	SandboxDir string
}

// Events is told about what the driver does on its own or on a request's
// way, for counting (the metrics package implements it). Its methods must
// be safe for concurrent use and return at once.
type Events interface {
	// ConflictRefused: a CreateNetwork was answered with a refusal because
	// of networks holding its parent (rule 3, after the stale check).
	ConflictRefused()
	// StaleRemoved: a conflicting holder Docker no longer knows was
	// removed (one call per holder).
	StaleRemoved()
	// ReservationRolledBack: a pending reservation was rolled back; the
	// driver's kind is "network" (at start, or by the janitor past its
	// deadline).
	ReservationRolledBack(kind string)
	// ReconcileAction: a step of the restore plan was carried out; op is
	// the step's kind (rollback, recreate, release, forget, keep,
	// delete-stray, repoint, shim, routes).
	ReconcileAction(op string)
	// RepairAction: a step of a live-repair pass was carried out (recreate,
	// shim).
	RepairAction(op string)
	// ContainerRepair: a container's interface whose parent link was
	// deleted was made again, or not (reconcile.ContainerRepaired...).
	ContainerRepair(result string)
}

// noEvents is the Events of a driver nobody counts.
type noEvents struct{}

func (noEvents) ConflictRefused()             {}
func (noEvents) StaleRemoved()                {}
func (noEvents) ReservationRolledBack(string) {}
func (noEvents) ReconcileAction(string)       {}
func (noEvents) RepairAction(string)          {}
func (noEvents) ContainerRepair(string)       {}

// Driver implements the remote NetworkDriver protocol.
type Driver struct {
	store  Store
	links  netlinkutil.Links
	leases *leases.Leases // DHCP and DHCPv6 leases of endpoints (driver/internal/leases)
	// holders rules out a create's conflicting holders with Docker
	// (driver/internal/reconcile).
	holders *reconcile.Holders
	grace   time.Duration
	lookup  time.Duration
	mark    string
	boot    string
	scope   string
	pending time.Duration
	log     *slog.Logger
	crash   func(string)
	events  Events
	now     func() time.Time
	locks   *keylock.Locker
	joins   *joins.Table // every join, wherever kept (driver/internal/joins)
	// deleting are the links underlay is deleting itself (driver/internal/links).
	deleting links.SelfDeletions
	// lan probes endpoints' addresses on their parents and announces
	// joined ones (driver/internal/lan); claims are the DHCP offers
	// creates in flight are checking.
	lan    *lan.LAN
	claims lan.Claims
	// resolver resolves networks' parent options on this host, parents
	// create the parent links underlay owns (driver/internal/links).
	resolver *links.Resolver
	parents  *links.Maker
	// owned deletes links and re-creates and follows the parent links
	// underlay owns (driver/internal/links).
	owned *links.Owned
	// reconcile carries out the planners' steps: at start, the janitor's,
	// the live repair's (driver/internal/reconcile).
	reconcile *reconcile.Executor
	// operator answers underlay ls and doctor, and carries out doctor's
	// repairs (driver/internal/reconcile).
	operator *reconcile.Operator
	// shims make networks' host links (driver/internal/links).
	shims *links.Shims
	// macs chooses endpoints' MACs (driver/internal/lan).
	macs *lan.Chooser
	// ifnames are the interface names endpoints asked for (driver/internal/joins).
	ifnames joins.IfNames
	// lanChecks are the background LAN preflights and their latest
	// results (lanpreflight.go).
	lanChecks *lanPreflight
	// sandboxes reads joined endpoints' interfaces in their containers
	// (containers.go); nil: the container-side repair is off.
	sandboxes sandboxes
	// reads are the reads of joined endpoints' interfaces running, by
	// endpoint; readFailed is set once one failed (said at WARN once).
	reads      runs.Set
	readFailed atomic.Bool

	janitorOnce sync.Once
	stop        chan struct{}
	stopped     chan struct{}
}

// New returns a driver. Call Restore before serving requests.
func New(c Config) (*Driver, error) {
	if c.Store == nil || c.Links == nil {
		return nil, errors.New("driver needs a store and a link layer")
	}
	if c.Scope == "" {
		c.Scope = "local"
	}
	if c.Scope != "local" && c.Scope != "global" {
		return nil, fmt.Errorf("scope %q is not valid: use local or global", c.Scope)
	}
	if c.PendingTimeout == 0 {
		c.PendingTimeout = 60 * time.Second
	}
	if c.StaleGrace == 0 {
		c.StaleGrace = 3 * time.Second
	}
	if c.LookupTimeout == 0 {
		c.LookupTimeout = 2 * time.Second
	}
	if c.Instance == "" {
		return nil, errors.New("driver needs the state file's instance ID to mark its links")
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Events == nil {
		c.Events = noEvents{}
	}
	blocker, _ := c.Links.(leases.AddrBlocker)
	announcer, _ := c.Prober.(lan.Announcer)
	d := &Driver{
		lan:   &lan.LAN{Links: c.Links, Routes: c.Routes, Prober: c.Prober, Announcer: announcer, Log: c.Logger},
		store: c.Store, links: c.Links, grace: c.StaleGrace, lookup: c.LookupTimeout, mark: kernel.Mark(c.Instance), boot: c.BootID,
		scope: c.Scope, pending: c.PendingTimeout,
		log: c.Logger, crash: c.CrashPoint, events: c.Events, now: c.Now, locks: keylock.New(), joins: joins.NewTable(),
		stop: make(chan struct{}), stopped: make(chan struct{}),
	}
	d.lanChecks = newLANPreflight(c.LANCheck, LANCheckTimeout, lanCheckSettle, c.Logger)
	d.resolver = &links.Resolver{Links: c.Links, Routes: c.Routes}
	d.parents = &links.Maker{Links: c.Links, Mark: d.mark}
	mover, _ := c.Links.(links.BlockMover)
	d.owned = &links.Owned{Kernel: c.Links, Store: c.Store, Locks: d.locks, Parents: d.parents, Resolver: d.resolver,
		Mark: d.mark, Blocks: mover, Log: c.Logger, Now: c.Now, Deleting: &d.deleting}
	d.shims = &links.Shims{Links: c.Links, Mark: d.mark, Log: c.Logger, DeleteOwned: d.owned.Delete}
	d.leases = leases.New(leases.Config{Store: c.Store, Links: c.Links, DHCP: dhcpClient(c.DHCP), DHCPv6: c.DHCPv6, Blocker: blocker, Mark: d.mark,
		Log: c.Logger, Now: c.Now, Stop: d.stop, Locks: d.locks})
	d.reconcile = &reconcile.Executor{Kernel: c.Links, Store: c.Store, Owned: d.owned, Parents: d.parents, Shims: d.shims, Joins: d.joins,
		IfNames: &d.ifnames, Leases: d.leases, LAN: d.lan, CrashPoint: c.CrashPoint,
		Mark: d.mark, Boot: d.boot, Log: c.Logger, Now: c.Now, Events: c.Events, Deleting: &d.deleting, Removed: d.lanChecks.Drop,
		Locks: d.locks}
	if sb, ok := c.Links.(sandboxes); ok && c.ContainerRepairWait >= 0 {
		d.sandboxes = sb
		d.reconcile.Sandboxes, d.reconcile.ContainerWait = sb, cmp.Or(c.ContainerRepairWait, DefaultContainerRepairWait)
		d.reconcile.SandboxDir = c.SandboxDir
	}
	d.operator = &reconcile.Operator{Kernel: c.Links, Store: c.Store, Locks: d.locks, Docker: c.Docker, Reconcile: d.reconcile, Owned: d.owned,
		Joins: d.joins, Events: c.Events, Mark: d.mark, Boot: d.boot,
		Grace: c.StaleGrace, Window: d.CreateWindow(), Log: c.Logger, Now: c.Now}
	d.macs = &lan.Chooser{Links: c.Links, Log: c.Logger}
	d.holders = &reconcile.Holders{
		Check: &reconcile.Checker{Docker: c.Docker, Grace: c.StaleGrace, Lookup: c.LookupTimeout, Now: c.Now, Log: c.Logger},
		Locks: d.locks, Remover: d.reconcile, Events: c.Events, Log: c.Logger,
	}
	return d, nil
}

// point marks a named crash point.
func (d *Driver) point(name string) {
	if d.crash != nil {
		d.crash(name)
	}
}

// CrashPoints lists every named step at which a test may kill the daemon:
// before and after each kernel change and each store commit.
func CrashPoints() []string {
	return []string{
		"create-network/before-remove-stale", "create-network/after-remove-stale",
		"create-network/before-reserve", "create-network/after-reserve",
		"create-network/before-parent-link", "create-network/after-parent-link",
		"create-network/before-commit", "create-network/after-commit",
		"create-endpoint/before-commit", "create-endpoint/after-commit",
		"join/before-link", "join/after-link",
		"leave/before-link-delete", "leave/after-link-delete",
		"delete-endpoint/before-link-delete", "delete-endpoint/after-link-delete",
		"delete-endpoint/before-commit", "delete-endpoint/after-commit",
		"delete-network/before-link-delete", "delete-network/after-link-delete",
		"delete-network/before-commit", "delete-network/after-commit",
		"delete-network/before-parent-delete", "delete-network/after-parent-delete",
	}
}

// Close stops the background janitor and the LAN preflights, and waits
// for them.
func (d *Driver) Close() {
	d.lanChecks.close()
	select {
	case <-d.stop:
	default:
		close(d.stop)
	}
	d.reads.StopAll() // at once, as the janitor is told to stop
	d.janitorOnce.Do(func() { close(d.stopped) })
	<-d.stopped
	d.leases.Wait()
	d.lan.Close()
}

// NetworkChecker asks Docker whether a network still exists
// (dockerapi.Client). It is called only on the CreateNetwork conflict
// path: never on the endpoint path, where a call back into dockerd can
// deadlock it at start.
type NetworkChecker interface {
	// NetworkExists reports whether Docker knows the network; an error means
	// it could not tell.
	NetworkExists(ctx context.Context, id string) (bool, error)
}

// dhcpClient is the leases' client over c; nil without one.
func dhcpClient(c *dhcp.Client) leases.Client {
	if c == nil {
		return nil
	}
	return leases.NewOverDHCP(c)
}
