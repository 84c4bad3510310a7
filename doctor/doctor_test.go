package doctor

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/underlay-net/underlay/store"
	"github.com/underlay-net/underlay/store/record"
)

const (
	netA = "aaaaaaaaaaaa0000000000000000000000000000000000000000000000000001"
	netB = "bbbbbbbbbbbb0000000000000000000000000000000000000000000000000002"
	epA  = "eaeaeaeaeaea0000000000000000000000000000000000000000000000000001"
	mark = "underlay:inst1"
)

var now = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// healthy is a state with nothing wrong: network A on eth0 with a joined
// endpoint, network B on underlay's VLAN eth0.10 with a host link, and a
// pool in use; Docker knows both networks.
func healthy() Input {
	return Input{
		Now: now, Boot: "boot-2", Mark: mark, Grace: 3 * time.Second,
		Networks: []record.Network{
			{ID: netA, Parent: "eth0", IPv4: []record.Pool{{Subnet: "198.18.1.0/24"}}, Created: now.Add(-time.Hour)},
			{ID: netB, Parent: "eth0.10", HostAddress: "198.18.2.5", IPv4: []record.Pool{{Subnet: "198.18.2.0/24"}}, Created: now.Add(-time.Hour)},
		},
		Endpoints: []record.Endpoint{{NetworkID: netA, ID: epA, Link: "uleeaeaeaeaeaea", Sandbox: "/run/docker/netns/x", Boot: "boot-2"}},
		Owned:     []record.ParentLink{{Name: "eth0.10", Kind: "vlan", Base: "eth0", VLAN: 10}},
		Pools:     []store.IPAMPool{{ID: "underlay-local/198.18.1.0/24", Prefix: "198.18.1.0/24", Created: now.Add(-time.Hour)}},
		Links: []kernel.Link{
			{Name: "lo", Index: 1}, {Name: "eth0", Index: 2},
			{Name: "eth0.10", Index: 3, Kind: "vlan", Alias: mark},
			{Name: "ulhbbbbbbbbbbbb", Index: 4, Kind: "macvlan", Alias: mark},
			{Name: "mv-user", Index: 5, Kind: "macvlan"},
			{Name: "uleffffffffffff", Index: 6, Kind: "macvlan", Alias: "underlay:other-instance"},
		},
		HostLinks: map[string]string{netB: "ulhbbbbbbbbbbbb"},
		PoolGrace: time.Minute,
		Docker:    &Docker{Subnets: []netip.Prefix{netip.MustParsePrefix("198.18.1.0/24"), netip.MustParsePrefix("198.18.2.0/24")}, Missing: map[string]bool{}},
	}
}

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*Input)
		want   []string // kind subject op
		// skipped are texts the skips say, one skip each but for the
		// texts of one skip (an Unsure network's).
		skipped []string
	}{
		{name: "healthy", change: func(*Input) {}},
		{name: "Docker does not know a network", change: func(in *Input) { in.Docker.Missing[netA] = true },
			want: []string{"stale-network " + netA + " remove-stale-network"}},
		{name: "a young network Docker does not know yet is not stale", change: func(in *Input) {
			in.Docker.Missing[netA] = true
			in.Networks[0].Created = now.Add(-time.Second)
		}},
		{name: "records without a creation time count as old", change: func(in *Input) {
			in.Docker.Missing[netA] = true
			in.Networks[0].Created = time.Time{}
		}, want: []string{"stale-network " + netA + " remove-stale-network"}},
		{name: "Docker unreachable: both Docker checks skipped with the reason, no stale or pool findings", change: func(in *Input) {
			in.Docker, in.DockerError = nil, "dial unix /run/docker.sock: connect: no such file or directory"
			in.Pools = append(in.Pools, store.IPAMPool{ID: "p2", Prefix: "198.18.9.0/24", Created: now.Add(-time.Hour)})
		}, skipped: []string{"stale-network check skipped: Docker could not be asked (dial unix /run/docker.sock: connect: no such file or directory)",
			"unused-pool check skipped: Docker could not be asked (dial unix /run/docker.sock"}},
		{name: "Docker unsure about one network", change: func(in *Input) { in.Docker.Unsure = map[string]string{netA: "timeout"} },
			skipped: []string{"stale-network check of network aaaaaaaaaaaa skipped", "timeout"}},
		{name: "owned parent missing", change: func(in *Input) { in.Links = append(in.Links[:2], in.Links[3:]...) },
			want: []string{"missing-parent eth0.10 recreate-parent"}},
		{name: "user's parent missing: a finding without repair", change: func(in *Input) { in.Links = in.Links[2:] },
			want: []string{"parent-gone eth0 "}},
		{name: "marked link without a record", change: func(in *Input) {
			in.Links = append(in.Links, kernel.Link{Name: "ulecccccccccccc", Index: 9, Kind: "macvlan", Alias: mark})
		}, want: []string{"orphan-link ulecccccccccccc delete-orphan-link"}},
		{name: "host link of a removed network", change: func(in *Input) { delete(in.HostLinks, netB) },
			want: []string{"orphan-link ulhbbbbbbbbbbbb delete-orphan-link"}},
		{name: "expired network reservation", change: func(in *Input) {
			in.Networks[1].Pending = &record.Reservation{Token: "t", Deadline: now.Add(-time.Second)}
		}, want: []string{"expired-reservation " + netB + " rollback-reservation"}},
		{name: "pending reservation not yet expired", change: func(in *Input) {
			in.Networks[1].Pending = &record.Reservation{Token: "t", Deadline: now.Add(time.Second)}
		}},
		{name: "expired pool reservation", change: func(in *Input) {
			in.Pools = append(in.Pools, store.IPAMPool{ID: "p2", Prefix: "198.18.9.0/24", Auto: true, Pending: &record.Reservation{Deadline: now.Add(-time.Minute)}})
		}, want: []string{"expired-reservation p2 release-pool"}},
		{name: "pool no network uses", change: func(in *Input) {
			in.Pools = append(in.Pools, store.IPAMPool{ID: "p2", Prefix: "198.18.9.0/24", Created: now.Add(-time.Hour)})
		}, want: []string{"unused-pool p2 release-pool"}},
		{name: "pool a Docker network of another driver uses", change: func(in *Input) {
			in.Pools = append(in.Pools, store.IPAMPool{ID: "p2", Prefix: "198.18.9.0/24", Created: now.Add(-time.Hour)})
			in.Docker.Subnets = append(in.Docker.Subnets, netip.MustParsePrefix("198.18.8.0/21")) // as Docker lists it, wider
		}},
		{name: "a pool handed out within the create window", change: func(in *Input) {
			in.Pools = append(in.Pools, store.IPAMPool{ID: "p2", Prefix: "198.18.9.0/24", Created: now.Add(-30 * time.Second)})
		}},
		{name: "an endpoint joined in an earlier boot is no finding (every reader ignores such joins)", change: func(in *Input) { in.Endpoints[0].Boot = "boot-1" }},
		{name: "the host link with its address is healthy", change: func(in *Input) {
			in.HostLinkAddrs = map[string][]netip.Addr{"ulhbbbbbbbbbbbb": {netip.MustParseAddr("198.18.2.5")}}
		}},
		{name: "an owned VLAN set down", change: func(in *Input) { in.Links[2].Down = true },
			want: []string{"broken-link eth0.10 heal-link"}},
		{name: "a host link without its address", change: func(in *Input) { in.HostLinkAddrs = map[string][]netip.Addr{"ulhbbbbbbbbbbbb": nil} },
			want: []string{"broken-link ulhbbbbbbbbbbbb heal-link"}},
		{name: "a host link with another MTU than the network's", change: func(in *Input) { in.Networks[1].MTU = 1400; in.Links[3].MTU = 1500 },
			want: []string{"broken-link ulhbbbbbbbbbbbb heal-link"}},
		{name: "a down link of another instance is not ours", change: func(in *Input) { in.Links[5].Down = true }},
		{name: "a down owned VLAN no network needs is not healed (the janitor releases it)", change: func(in *Input) {
			in.Networks = in.Networks[:1]
			delete(in.HostLinks, netB)
			in.Links[2].Down = true
		}, want: []string{"orphan-link ulhbbbbbbbbbbbb delete-orphan-link"}},
		{name: "a lost DHCP lease", change: func(in *Input) {
			in.Endpoints[0].Lease = &record.Lease{Addr: "198.18.1.10/24", Expiry: now.Add(time.Hour), Lost: now.Add(-time.Minute), LostWhy: "DHCPNAK"}
		}, want: []string{"lost-lease " + epA + " "}},
		{name: "a lease that expired while the daemon was down is lost", change: func(in *Input) {
			in.Endpoints[0].Lease = &record.Lease{Addr: "198.18.1.10/24", Expiry: now.Add(-time.Minute)}
		}, want: []string{"lost-lease " + epA + " "}},
		{name: "a bound lease is no finding", change: func(in *Input) {
			in.Endpoints[0].Lease = &record.Lease{Addr: "198.18.1.10/24", T1: now.Add(time.Minute), T2: now.Add(2 * time.Minute), Expiry: now.Add(time.Hour)}
		}},
		{name: "a lost DHCPv6 lease", change: func(in *Input) {
			in.Endpoints[0].Lease6 = &record.Lease6{Addr: "2001:db8::10", Acquired: now.Add(-time.Minute), T1: time.Hour, T2: 2 * time.Hour, Valid: 3 * time.Hour, Lost: now.Add(-time.Second), LostWhy: "NoBinding"}
		}, want: []string{"lost-lease " + epA + " "}},
		{name: "a DHCPv6 lease past its valid lifetime while the daemon was down is lost", change: func(in *Input) {
			in.Endpoints[0].Lease6 = &record.Lease6{Addr: "2001:db8::10", Acquired: now.Add(-time.Hour), T1: time.Minute, T2: 2 * time.Minute, Valid: 3 * time.Minute}
		}, want: []string{"lost-lease " + epA + " "}},
		{name: "a DHCPv6 lease rebinding, or infinite, is no finding", change: func(in *Input) {
			in.Endpoints[0].Lease6 = &record.Lease6{Addr: "2001:db8::10", Acquired: now.Add(-time.Hour), T1: time.Minute, T2: 2 * time.Minute, Valid: 2 * time.Hour}
			in.Endpoints = append(in.Endpoints, record.Endpoint{NetworkID: in.Endpoints[0].NetworkID, ID: "e2", Link: "ule2",
				Lease6: &record.Lease6{Addr: "2001:db8::11", Acquired: now.Add(-time.Hour), T1: record.Infinite6, T2: record.Infinite6, Preferred: record.Infinite6, Valid: record.Infinite6}})
		}},
		{name: "both leases of a dual-stack endpoint lost", change: func(in *Input) {
			in.Endpoints[0].Lease = &record.Lease{Addr: "198.18.1.10/24", Expiry: now.Add(time.Hour), Lost: now.Add(-time.Minute), LostWhy: "DHCPNAK"}
			in.Endpoints[0].Lease6 = &record.Lease6{Addr: "2001:db8::10", Acquired: now.Add(-time.Minute), T1: time.Hour, T2: 2 * time.Hour, Valid: 3 * time.Hour, Lost: now.Add(-time.Second), LostWhy: "NoBinding"}
		}, want: []string{"lost-lease " + epA + " ", "lost-lease " + epA + " "}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := healthy()
			tc.change(&in)
			findings, skipped := Check(in)
			var got []string
			for _, f := range findings {
				op := ""
				if f.Action != nil {
					op = string(f.Action.Op)
				}
				got = append(got, f.Kind+" "+f.Subject+" "+op)
				if f.Message == "" || f.Repair == "" {
					t.Errorf("finding %+v lacks its meaning or its repair", f)
				}
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("findings %q, want %q", got, tc.want)
			}
			var skips []string
			for _, sk := range skipped {
				skips = append(skips, sk.String())
				if sk.Check == "" || sk.Reason == "" {
					t.Errorf("skip %+v does not name its check or its reason", sk)
				}
			}
			if len(skips) != len(tc.skipped) && !(len(tc.skipped) > 0 && len(skips) == 1) {
				t.Errorf("skipped %q, want %q", skips, tc.skipped)
			}
			for _, w := range tc.skipped {
				if !strings.Contains(strings.Join(skips, "\n"), w) {
					t.Errorf("skipped %q do not say %q", skips, w)
				}
			}
		})
	}
}

// TestLostLease6Message: the finding of a lost DHCPv6 lease names the
// family, the address, the DUID and IAID, when and why, and that the
// address is blocked; one past its expiry unmarked says it expired while
// the daemon was down.
func TestLostLease6Message(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	ep := record.Endpoint{NetworkID: "aaaaaaaaaaaa1", ID: "eeeeeeeeeeee1", Link: "ule1",
		Lease6: &record.Lease6{Addr: "2001:db8::10", DUID: "00030001020000000001", IAID: "0a0b0c0d", Acquired: now.Add(-time.Hour),
			T1: time.Minute, T2: 2 * time.Minute, Valid: 3 * time.Hour, Lost: now.Add(-time.Minute), LostWhy: "NoBinding at the renewal"}}
	got := lostLeases(Input{Now: now, Endpoints: []record.Endpoint{ep}})
	if len(got) != 1 {
		t.Fatalf("findings %+v, want one", got)
	}
	for _, want := range []string{"endpoint eeeeeeeeeeee of network aaaaaaaaaaaa lost its DHCPv6 lease of 2001:db8::10 (DUID 00030001020000000001, IAID 0a0b0c0d) at 2026-11-30T11:59:00Z (NoBinding at the renewal)", "blocked on the parent"} {
		if !strings.Contains(got[0].Message, want) {
			t.Errorf("message %q lacks %q", got[0].Message, want)
		}
	}
	if got[0].Action != nil || !strings.Contains(got[0].Repair, "DHCPv6 server") {
		t.Errorf("finding %+v: want no action, the repair naming the DHCPv6 server", got[0])
	}
	ep.Lease6.Lost, ep.Lease6.LostWhy, ep.Lease6.Valid = time.Time{}, "", 30*time.Minute
	got = lostLeases(Input{Now: now, Endpoints: []record.Endpoint{ep}})
	if len(got) != 1 || !strings.Contains(got[0].Message, "at 2026-11-30T11:30:00Z (it expired while the daemon was not running)") {
		t.Errorf("unmarked past its expiry: %+v", got)
	}
}

// A joined endpoint whose interface stood on another link than its
// parent's now (or on a parent now missing) is a finding naming the
// container's interface and its parent; on the same link it is not.
func TestLostContainerInterface(t *testing.T) {
	for _, c := range []struct {
		name  string
		index int // eth0's index the interface stood on
		drop  bool
		want  string
	}{
		{"on the parent as it is", 2, false, ""},
		{"parent made again", 1, false, "was made again (index 2, was 1)"},
		{"parent missing", 2, true, "which is missing"},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := healthy()
			in.Endpoints[0].Plumb = &record.Plumb{IfName: "eth0", ParentIndex: c.index}
			if c.drop {
				in.Links = append(in.Links[:1:1], in.Links[2:]...)
			}
			var got []Finding
			for _, f := range lostInterfaces(in) {
				got = append(got, f)
			}
			switch {
			case c.want == "" && len(got) != 0:
				t.Fatalf("findings %+v", got)
			case c.want != "" && (len(got) != 1 || got[0].Kind != "container-interface" || got[0].Subject != epA ||
				!strings.Contains(got[0].Message, c.want) || !strings.Contains(got[0].Message, "interface eth0")):
				t.Fatalf("findings %+v, want one naming %q", got, c.want)
			}
		})
	}
}
