//go:build bench

package bench

import (
	"fmt"
	"testing"
	"time"

	"github.com/docker/go-plugins-helpers/network"
	"github.com/underlay-net/underlay/internal/itest"
)

// benchProbe measures what address_probe adds to a container's start:
// the endpoint cycle (CreateEndpoint, Join, Leave, DeleteEndpoint, as
// Docker runs it) of a network with the default probe (300ms) beside one
// with address_probe=0, in alternating blocks, on veth parents whose LAN
// holds no host answering (the probe runs its whole budget): IPv4 (ARP
// probes) and IPv6 (Neighbour Solicitations from ::, the probe DHCPv6
// offers get too). Target: the added time is the budget, and at most 50 ms
// more.
func benchProbe(t *testing.T, tb *table) {
	benchProbeFamily(t, tb, false)
	benchProbeFamily(t, tb, true)
}

func benchProbeFamily(t *testing.T, tb *table, v6 bool) {
	const budget = 300 * time.Millisecond
	ns := itest.NewNetns(t)
	p0, p1, fam := "vq0", "vq1", "IPv4"
	if v6 {
		p0, p1, fam = "vq6a", "vq6b", "IPv6"
	}
	ns.AddVeth(p0, p0+"-peer", 1500)
	ns.AddVeth(p1, p1+"-peer", 1500)
	d := itest.StartDaemon(t, ns, itest.DaemonOptions{Args: []string{"--log-level", "warn"}})
	on, off := id("p", 1, 0), id("p", 0, 0)
	addr := func(x, i int) (v4, v6 string) { return fmt.Sprintf("198.18.%d.%d/24", 60+x, 2+i%250), "" }
	if v6 {
		on, off = id("p", 3, 0), id("p", 2, 0)
		d.MustCreateNetwork(itest.Net{ID: off, Opts: map[string]string{"parent": p0, "address_probe": "0"}, V6: []string{"2001:db8:160::/64"}})
		d.MustCreateNetwork(itest.Net{ID: on, Opts: map[string]string{"parent": p1, "address_probe": budget.String()}, V6: []string{"2001:db8:161::/64"}})
		addr = func(x, i int) (string, string) { return "", fmt.Sprintf("2001:db8:%x::%x/64", 0x160+x, 2+i) }
	} else {
		d.MustCreateNetwork(itest.Net{ID: off, Opts: map[string]string{"parent": p0, "address_probe": "0"}, V4: []string{"198.18.60.0/24"}})
		d.MustCreateNetwork(itest.Net{ID: on, Opts: map[string]string{"parent": p1, "address_probe": budget.String()}, V4: []string{"198.18.61.0/24"}})
	}
	call := func(route string, req any) error {
		code, body, err := d.Post("/NetworkDriver."+route, req)
		if err == nil && code != 200 {
			err = fmt.Errorf("%s: %s", route, body)
		}
		return err
	}
	cycle := func(netID string, x int) func(w, i int) error {
		return func(w, i int) error {
			ep := id("q", x, i)
			a4, a6 := addr(x, i)
			for _, step := range []struct {
				route string
				req   any
			}{
				{"CreateEndpoint", network.CreateEndpointRequest{NetworkID: netID, EndpointID: ep, Interface: &network.EndpointInterface{Address: a4, AddressIPv6: a6}}},
				{"Join", network.JoinRequest{NetworkID: netID, EndpointID: ep, SandboxKey: "/var/run/docker/netns/bench"}},
				{"Leave", network.LeaveRequest{NetworkID: netID, EndpointID: ep}},
				{"DeleteEndpoint", network.DeleteEndpointRequest{NetworkID: netID, EndpointID: ep}},
			} {
				if err := call(step.route, step.req); err != nil {
					return err
				}
			}
			return nil
		}
	}
	var withProbe, without result
	run(1, 2, cycle(on, 1))
	run(1, 2, cycle(off, 0))
	n := 0
	for b := 0; b < 6; b++ {
		first, second := &withProbe, &without
		f1, f2 := cycle(on, 1), cycle(off, 0)
		if b%2 == 1 {
			first, second, f1, f2 = second, first, f2, f1
		}
		base := n
		first.add(run(1, 5, func(w, i int) error { return f1(w, base+i) }))
		second.add(run(1, 5, func(w, i int) error { return f2(w, base+i) }))
		n += 5
	}
	if withProbe.failures+without.failures > 0 {
		t.Errorf("%s probe bench: %d cycles with the probe and %d without failed", fam, withProbe.failures, without.failures)
	}
	added := withProbe.pct(0.5) - without.pct(0.5)
	tb.row("probe", fmt.Sprintf("%s endpoint cycle p50, address_probe=%s vs 0 (c=1)", fam, budget), ms(withProbe.pct(0.5)), ms(without.pct(0.5)),
		"+"+ms(added), fmt.Sprintf("<= +%s + 50 ms", ms(budget)), verdict(added <= budget+50*time.Millisecond))
	tb.row("probe", fam+" endpoint cycle p99, with / without the probe", ms(withProbe.pct(0.99)), ms(without.pct(0.99)), "", "", "")
}
