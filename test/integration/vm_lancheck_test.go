//go:build vm

package integration

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/underlay-net/underlay/internal/itest"
	"github.com/underlay-net/underlay/lancheck"
)

// `underlay doctor --lan` on an 802.1Q VLAN (the VM's kernel has 8021q
// and ipvlan), through the binary, against the in-process DHCP server on
// VLAN 10 of the test LAN: on ipvlan l2 the DISCOVER goes out with the
// VLAN's own MAC and a client ID and is answered, new-mac has nothing to
// check, the parent check names the VLAN's base, and nothing is leased; on
// macvlan the throwaway child is made on the VLAN and the router answers
// it; a VLAN underlay would make at the create (VLAN 20, not there yet) is
// judged by its base, and the wire checks wait for it.
func TestVMLANCheckOnAVLAN(t *testing.T) {
	t.Parallel()
	ns := itest.NewNetns(t)
	itest.RequireKernelLinks(t, ns)
	lan := itest.NewVLANLAN(t, ns, "lan0", 10, dhcpServer)
	srv := lan.Serve(itest.DHCPConfig{LeaseTime: dhcpLease})
	ns.AddVLAN("lan0.10", "lan0", 10)
	ns.Up("lan0.10")
	bin := itest.Binary(t)
	run := func(parent string, opts ...string) (map[string]lancheck.Item, int) {
		t.Helper()
		// 10 s, twice the default budget: under the VM's emulation, beside
		// the suite's other parallel tests, the binary takes about a second
		// to start, and the offer's router, asked after the collectors, was
		// once left 600 ms, too little for its three probes (run 22).
		args := append([]string{"doctor", "--lan", parent, "--json", "--timeout", "10s"}, opts...)
		out, errOut, code := itest.RunIn(t, ns, time.Minute, nil, bin, args...)
		var r struct{ Checks []lancheck.Item }
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("underlay %v: exit %d, %v\n%s%s", args, code, err, out, errOut)
		}
		items := map[string]lancheck.Item{}
		for _, it := range r.Checks {
			items[string(it.Check)+"/"+it.Family] = it
		}
		return items, code
	}
	want := func(items map[string]lancheck.Item, key string, v lancheck.Verdict, mention ...string) {
		t.Helper()
		it, ok := items[key]
		if !ok || it.Verdict != v {
			t.Errorf("%s: %+v, want %s", key, it, v)
			return
		}
		for _, m := range mention {
			if !strings.Contains(it.Evidence, m) {
				t.Errorf("%s: evidence %q does not mention %q", key, it.Evidence, m)
			}
		}
	}

	items, code := run("lan0.10", "-o", "type=ipvlan", "-o", "ipvlan_mode=l2", "-o", "dhcp=true")
	want(items, "parent/", lancheck.OK, "its base lan0")
	want(items, "dhcp/", lancheck.OK, dhcpServer.Addr().String())
	want(items, "new-mac/", lancheck.OK, "parent's MAC")
	want(items, "gateway/ipv4", lancheck.OK, dhcpServer.Addr().String())
	if code != 0 {
		t.Errorf("ipvlan on lan0.10: exit %d, want 0", code)
	}

	items, code = run("lan0.10", "-o", "dhcp=true")
	want(items, "new-mac/", lancheck.OK, "throwaway macvlan child")
	want(items, "dhcp/", lancheck.OK)
	if code != 0 {
		t.Errorf("macvlan on lan0.10: exit %d, want 0", code)
	}

	items, code = run("lan0.20", "-o", "dhcp=true")
	want(items, "parent/", lancheck.OK, "underlay makes VLAN 20 on lan0")
	want(items, "dhcp/", lancheck.Unknown, "lan0.20 does not exist")
	if code != 0 {
		t.Errorf("a VLAN not made yet: exit %d, want 0 (unknown never changes the code)", code)
	}

	// DISCOVERs only: nothing leased at the server.
	if itest.WaitFor(time.Second, func() bool { return len(srv.Leases()) > 0 }) {
		t.Errorf("the server holds leases after the LAN checks:\n%s", srv.LeasesString())
	}
	if ls := ns.LinkNames(); len(ls) != 3 {
		t.Errorf("links left in the namespace: %v (want lo, lan0, lan0.10)", ls)
	}
}
