package control

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/underlay-net/underlay/doctor"
	"github.com/underlay-net/underlay/internal/dockerid"
	"github.com/underlay-net/underlay/lancheck"
	"github.com/underlay-net/underlay/store/record"
)

// Listing is `underlay ls --json`: one object, fields as documented in
// docs/operating.md (Operating underlay).
type Listing struct {
	// Version is the daemon's version.
	Version string `json:"version"`
	// Docker says whether Docker could be asked (names are empty if not).
	Docker      DockerStatus   `json:"docker"`
	Networks    []NetworkEntry `json:"networks"`
	ParentLinks []ParentEntry  `json:"parent_links"`
	Pools       []PoolEntry    `json:"pools"`
	// Names are the IPAM's sticky addresses by endpoint name.
	Names []NameEntry `json:"names"`
}

// DockerStatus says whether Docker answered.
type DockerStatus struct {
	Reachable bool   `json:"reachable"`
	Error     string `json:"error,omitempty"`
}

// NetworkEntry is one network.
type NetworkEntry struct {
	ID   string `json:"id"`
	Name string `json:"name,omitempty"`
	Type string `json:"type"`
	Mode string `json:"mode"`
	Flag string `json:"flag,omitempty"`
	// Parent is the parent option as asked; Link the link it resolved to.
	Parent      string          `json:"parent"`
	Link        string          `json:"link"`
	Subnets     []string        `json:"subnets"`
	MTU         int             `json:"mtu,omitempty"`
	Internal    bool            `json:"internal"`
	HostAddress string          `json:"host_address,omitempty"`
	Created     time.Time       `json:"created,omitzero"`
	PendingTill time.Time       `json:"pending_until,omitzero"`
	Endpoints   []EndpointEntry `json:"endpoints"`
	// LANChecks are the items of the LAN preflight the daemon ran in the
	// background after the network's create (absent: none finished, as
	// with lan_check=false or after the daemon restarted).
	LANChecks []lancheck.Item `json:"lan_checks,omitempty"`
}

// EndpointEntry is one endpoint of a network.
type EndpointEntry struct {
	ID     string `json:"id"`
	Link   string `json:"link"`
	MAC    string `json:"mac,omitempty"`
	IPv4   string `json:"ipv4,omitempty"`
	IPv6   string `json:"ipv6,omitempty"`
	Joined bool   `json:"joined"`
	// Lease is the DHCP lease's state (bound, renewing, rebinding, lost);
	// empty for an endpoint without one.
	Lease string `json:"lease,omitempty"`
	// Lease6 is the DHCPv6 lease of an endpoint of an ipv6_mode=dhcpv6
	// network; nil for an endpoint without one.
	Lease6 *Lease6Entry `json:"lease6,omitempty"`
	// Interface is the endpoint's interface's name in its container, once
	// read there after the Join; Repairs the times underlay made it again
	// after its parent link was deleted and made again.
	Interface string `json:"interface,omitempty"`
	Repairs   int    `json:"repairs,omitempty"`
}

// Lease6Entry is an endpoint's DHCPv6 lease (IA_NA).
type Lease6Entry struct {
	// State is bound (before T1), renewing (T1 to T2), rebinding (T2 to
	// the expiry) or lost: the address is blocked on the parent until the
	// server gives it back (the states of Lease).
	State   string `json:"state"`
	Address string `json:"address"`
	// DUID and IAID (hex) are the client identity the lease was taken
	// with; Server (hex) is the DUID of the server that granted it.
	DUID   string `json:"duid"`
	IAID   string `json:"iaid"`
	Server string `json:"server,omitempty"`
	// Acquired is when the exchange that granted it began; T1 and T2 when
	// it is renewed and rebound, Preferred when the address is deprecated
	// and Expiry when it ends without a renewal. An infinite time ("never")
	// is left out.
	Acquired  time.Time `json:"acquired"`
	T1        time.Time `json:"t1,omitzero"`
	T2        time.Time `json:"t2,omitzero"`
	Preferred time.Time `json:"preferred_until,omitzero"`
	Expiry    time.Time `json:"expiry,omitzero"`
	// Lost is when it was lost (zero while held; a lease past its expiry
	// the daemon has not marked yet is lost without it), LostWhy how.
	Lost    time.Time `json:"lost,omitzero"`
	LostWhy string    `json:"lost_why,omitempty"`
}

// ParentEntry is a parent link underlay created and the networks on it.
type ParentEntry struct {
	Name     string   `json:"name"`
	Kind     string   `json:"kind"`
	Base     string   `json:"base,omitempty"`
	VLAN     int      `json:"vlan,omitempty"`
	Present  bool     `json:"present"`
	Networks []string `json:"networks"`
}

// PoolEntry is a pool of underlay's IPAM.
type PoolEntry struct {
	ID           string    `json:"id"`
	Space        string    `json:"space"`
	Prefix       string    `json:"prefix"`
	Range        string    `json:"range,omitempty"`
	Parent       string    `json:"parent,omitempty"`
	Gateway      string    `json:"gateway,omitempty"`
	Auto         bool      `json:"auto"`
	ReservedTill time.Time `json:"reserved_until,omitzero"`
	Created      time.Time `json:"created,omitzero"`
	Addresses    []string  `json:"addresses"`
}

// NameEntry is an endpoint name the IPAM remembers an address for.
type NameEntry struct {
	Name    string `json:"name"`
	Space   string `json:"space"`
	Subnet  string `json:"subnet"`
	Address string `json:"address"`
	// Held says the address is allocated now; else it is kept for the
	// name until KeptUntil.
	Held      bool      `json:"held"`
	LastUsed  time.Time `json:"last_used,omitzero"`
	KeptUntil time.Time `json:"kept_until,omitzero"`
}

func listing(st State, dk dockerView) Listing {
	l := Listing{Version: st.Version, Docker: DockerStatus{Reachable: dk.err == "", Error: dk.err},
		Networks: []NetworkEntry{}, ParentLinks: []ParentEntry{}, Pools: []PoolEntry{}, Names: []NameEntry{}}
	for _, n := range st.Names {
		l.Names = append(l.Names, NameEntry{Name: n.Name, Space: n.Space, Subnet: n.Subnet, Address: n.Address, Held: n.Held,
			LastUsed: n.LastUsed, KeptUntil: n.Until})
	}
	eps := map[string][]EndpointEntry{}
	for _, ep := range st.Endpoints {
		eps[ep.NetworkID] = append(eps[ep.NetworkID], EndpointEntry{ID: ep.ID, Link: ep.Link, MAC: ep.MAC, IPv4: ep.IPv4, IPv6: ep.IPv6,
			Joined: ep.Sandbox != "" && ep.Boot == st.Boot, Lease: leaseState(ep, st.Now), Lease6: lease6Entry(ep, st.Now)})
		if p := ep.Plumb; p != nil && ep.Boot == st.Boot {
			last := &eps[ep.NetworkID][len(eps[ep.NetworkID])-1]
			last.Interface, last.Repairs = p.IfName, p.Repairs
		}
	}
	on := map[string][]string{}
	for _, n := range st.Networks {
		e := NetworkEntry{ID: n.ID, Name: dk.names[n.ID], Type: n.Type, Mode: n.Mode, Flag: n.Flag, Parent: n.Options["parent"], Link: n.Parent,
			MTU: n.MTU, Internal: n.Internal, HostAddress: n.HostAddress, Created: n.Created, Subnets: []string{}, Endpoints: eps[n.ID],
			LANChecks: st.LAN[n.ID]}
		for _, p := range append(append([]record.Pool{}, n.IPv4...), n.IPv6...) {
			e.Subnets = append(e.Subnets, p.Subnet)
		}
		if n.Pending != nil {
			e.PendingTill = n.Pending.Deadline
		}
		if e.Endpoints == nil {
			e.Endpoints = []EndpointEntry{}
		}
		l.Networks = append(l.Networks, e)
		on[n.Parent] = append(on[n.Parent], n.ID)
	}
	present := map[string]bool{}
	for _, k := range st.Links {
		present[k.Name] = true
	}
	for _, p := range st.Owned {
		nets := on[p.Name]
		if nets == nil {
			nets = []string{}
		}
		l.ParentLinks = append(l.ParentLinks, ParentEntry{Name: p.Name, Kind: p.Kind, Base: p.Base, VLAN: p.VLAN, Present: present[p.Name], Networks: nets})
	}
	for _, p := range st.Pools {
		e := PoolEntry{ID: p.ID, Space: p.Space, Prefix: p.Prefix, Range: p.Range, Parent: p.Parent, Gateway: p.Gateway, Auto: p.Auto,
			Created: p.Created, Addresses: p.Addresses}
		if p.Pending != nil {
			e.ReservedTill = p.Pending.Deadline
		}
		if e.Addresses == nil {
			e.Addresses = []string{}
		}
		l.Pools = append(l.Pools, e)
	}
	sort.Slice(l.Networks, func(i, j int) bool { return l.Networks[i].ID < l.Networks[j].ID })
	return l
}

func printListing(w io.Writer, l Listing) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NETWORK\tNAME\tTYPE\tPARENT\tLINK\tSUBNETS\tMTU\tINTERNAL\tCREATED\tPENDING UNTIL\tLAN")
	for _, n := range l.Networks {
		mode := n.Type + "/" + n.Mode
		if n.Flag != "" {
			mode += "/" + n.Flag
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", dockerid.Short(n.ID), dash(n.Name), mode, dash(n.Parent), n.Link,
			dash(strings.Join(n.Subnets, ",")), dashInt(n.MTU), yesNo(n.Internal), stamp(n.Created), stamp(n.PendingTill), lanSummary(n.LANChecks))
	}
	tw.Flush()
	fmt.Fprintln(w)
	fmt.Fprintln(tw, "ENDPOINT\tNETWORK\tLINK\tMAC\tADDRESSES\tJOINED\tLEASE\tLEASE6")
	for _, n := range l.Networks {
		for _, e := range n.Endpoints {
			state6 := ""
			if e.Lease6 != nil {
				state6 = e.Lease6.State
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", dockerid.Short(e.ID), dockerid.Short(n.ID), e.Link, dash(e.MAC), dash(strings.Trim(e.IPv4+","+e.IPv6, ",")), yesNo(e.Joined), dash(e.Lease), dash(state6))
		}
	}
	tw.Flush()
	fmt.Fprintln(w)
	fmt.Fprintln(tw, "DHCPV6 LEASE\tENDPOINT\tDUID\tIAID\tSTATE\tT1\tT2\tEXPIRY\tLOST")
	for _, n := range l.Networks {
		for _, e := range n.Endpoints {
			if l6 := e.Lease6; l6 != nil {
				lost := lostText(l6.Lost, l6.LostWhy)
				if l6.State == record.LeaseLost && l6.Lost.IsZero() {
					lost = lostText(l6.Expiry, "it expired while the daemon was not running")
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", l6.Address, dockerid.Short(e.ID), dash(l6.DUID), dash(l6.IAID), l6.State,
					never(l6.T1), never(l6.T2), never(l6.Expiry), lost)
			}
		}
	}
	tw.Flush()
	fmt.Fprintln(w)
	fmt.Fprintln(tw, "PARENT LINK (underlay's)\tKIND\tBASE\tVLAN\tPRESENT\tNETWORKS")
	for _, p := range l.ParentLinks {
		ids := make([]string, len(p.Networks))
		for i, id := range p.Networks {
			ids[i] = dockerid.Short(id)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", p.Name, p.Kind, dash(p.Base), dashInt(p.VLAN), yesNo(p.Present), dash(strings.Join(ids, ",")))
	}
	tw.Flush()
	fmt.Fprintln(w)
	fmt.Fprintln(tw, "POOL\tPREFIX\tRANGE\tPARENT\tAUTO\tRESERVED UNTIL\tADDRESSES")
	for _, p := range l.Pools {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\n", p.ID, p.Prefix, dash(p.Range), dash(p.Parent), yesNo(p.Auto), stamp(p.ReservedTill), len(p.Addresses))
	}
	tw.Flush()
	fmt.Fprintln(w)
	fmt.Fprintln(tw, "STICKY NAME\tSUBNET\tADDRESS\tHELD\tLAST USED\tKEPT UNTIL")
	for _, n := range l.Names {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", n.Name, n.Subnet, n.Address, yesNo(n.Held), stamp(n.LastUsed), stamp(n.KeptUntil))
	}
	tw.Flush()
}

// lanSummary is a network's LAN preflight in a word: "problem new-mac,dhcp"
// (each check once, in the order of the items), "ok" when no item is a
// problem and one is ok, "unknown" when every item is, "-" without one.
func lanSummary(items []lancheck.Item) string {
	var problems []string
	ok := false
	for _, it := range items {
		switch it.Verdict {
		case lancheck.Problem:
			if !slices.Contains(problems, string(it.Check)) {
				problems = append(problems, string(it.Check))
			}
		case lancheck.OK:
			ok = true
		}
	}
	switch {
	case len(problems) > 0:
		return "problem " + strings.Join(problems, ",")
	case ok:
		return "ok"
	case len(items) > 0:
		return "unknown"
	}
	return "-"
}

func printRepair(w io.Writer, r RepairResult) {
	if r.Error != "" {
		fmt.Fprintf(w, "could not repair %s %s: %s\n", r.Kind, r.Subject, r.Error)
		return
	}
	fmt.Fprintf(w, "repaired %s %s: %s\n", r.Kind, r.Subject, r.Result)
}

func printReport(stdout, stderr io.Writer, r Report, repaired bool) {
	for _, w := range r.Warnings {
		fmt.Fprintln(stderr, "warning:", w)
	}
	for _, f := range r.Findings {
		fmt.Fprintf(stdout, "%s %s: %s. --repair: %s\n", f.Kind, f.Subject, f.Message, f.Repair)
	}
	switch {
	case len(r.Findings) == 0 && !r.Complete:
		fmt.Fprintf(stdout, "incomplete: the checks that ran found nothing, but the %s %s skipped (see the warnings): health unknown\n",
			skippedChecks(r.Skipped), plural(len(r.Skipped), "check was", "checks were"))
	case len(r.Findings) == 0 && repaired && len(r.Repairs) > 0:
		fmt.Fprintf(stdout, "healthy after %d repairs\n", len(r.Repairs))
	case len(r.Findings) == 0:
		fmt.Fprintln(stdout, "healthy: nothing found")
	case repaired:
		fmt.Fprintf(stdout, "%d findings remain that --repair could not fix\n", len(r.Findings))
	default:
		fmt.Fprintf(stdout, "%d findings: run underlay doctor --repair to fix what is safe to fix\n", len(r.Findings))
	}
}

// skippedChecks names the skipped checks: "stale-network and unused-pool",
// "stale-network (network 3f2a1b4c5d6e)".
func skippedChecks(skips []doctor.Skip) string {
	names := make([]string, 0, len(skips))
	for _, s := range skips {
		n := s.Check
		if s.Subject != "" {
			n += " (network " + dockerid.Short(s.Subject) + ")"
		}
		names = append(names, n)
	}
	if len(names) <= 1 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func dashInt(n int) string {
	if n == 0 {
		return "-"
	}
	return strconv.Itoa(n)
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// never is a lease time, "never" for an infinite one (zero).
func never(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return stamp(t)
}

// lostText is when and how a lease was lost: "-" while held.
func lostText(at time.Time, why string) string {
	switch {
	case at.IsZero():
		return "-"
	case why == "":
		return stamp(at)
	}
	return stamp(at) + " (" + why + ")"
}

// lease6Entry is an endpoint's DHCPv6 lease at now; nil without one.
func lease6Entry(ep record.Endpoint, now time.Time) *Lease6Entry {
	l := ep.Lease6
	if l == nil {
		return nil
	}
	return &Lease6Entry{State: l.State(now), Address: l.Addr, DUID: l.DUID, IAID: l.IAID, Server: l.ServerID, Acquired: l.Acquired,
		T1: l.At(l.T1), T2: l.At(l.T2), Preferred: l.At(l.Preferred), Expiry: l.Expiry(), Lost: l.Lost, LostWhy: l.LostWhy}
}

// leaseState is an endpoint's DHCP lease state at now; "" without one.
func leaseState(ep record.Endpoint, now time.Time) string {
	if ep.Lease == nil {
		return ""
	}
	return ep.Lease.State(now)
}
