package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/underlay-net/underlay/internal/itest"
	"github.com/underlay-net/underlay/lancheck"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"golang.org/x/sys/unix"
)

// The LAN preflight, `underlay doctor --lan PARENT`, through the real
// binary in the test's near namespace, against a test LAN behind a switch
// (itest.SwitchLAN: a Linux bridge in a namespace of its own, a gateway
// and dnsmasq hosts on ports of their own, port security as an nftables
// rule on the parent's port). Each check's ok and its problem (or
// unknown) is asserted on a LAN made to show it; one test reads what the
// command put on the wire and what it left behind.

// lanParent is the parent's name in every near namespace here.
const lanParent = "lan0"

// lanRun is one run of `underlay doctor --lan`.
type lanRun struct {
	args         []string
	out, errOut  string
	code         int
	took         time.Duration
	started, end time.Time
	shown        bool            // the report was printed with a failure
	Checks       []lancheck.Item `json:"checks"`
}

// doctorLAN runs `underlay doctor --lan parent --json --timeout 3s ARGS...`
// in ns; a run that exits 0 or 1 must print the JSON report, and say
// problem in an item exactly when it exits 1.
func doctorLAN(t *testing.T, ns *itest.Netns, parent string, args ...string) *lanRun {
	t.Helper()
	r := &lanRun{args: append([]string{"doctor", "--lan", parent, "--json", "--timeout", "3s"}, args...)}
	bin := itest.Binary(t) // built once per test process: not the run's time
	r.started = time.Now()
	r.out, r.errOut, r.code = itest.RunIn(t, ns, time.Minute, []string{"DOCKER_HOST=unix:///nonexistent/docker.sock"}, bin, r.args...)
	r.end = time.Now()
	r.took = r.end.Sub(r.started)
	t.Logf("underlay %s: exit %d in %s", strings.Join(r.args, " "), r.code, r.took.Round(time.Millisecond))
	// A sanity bound only, beside the parallel tests: TestLANCheckTimeout
	// holds the command to its --timeout, alone.
	if r.took > 10*time.Second {
		t.Errorf("underlay %s took %s with --timeout 3s", strings.Join(r.args, " "), r.took.Round(time.Millisecond))
	}
	if r.code != 0 && r.code != 1 {
		t.Fatalf("underlay %s exited %d, want 0 or 1\nstdout:\n%s\nstderr:\n%s", strings.Join(r.args, " "), r.code, r.out, r.errOut)
	}
	if err := json.Unmarshal([]byte(r.out), r); err != nil || len(r.Checks) == 0 {
		t.Fatalf("underlay %s: stdout is not a report {\"checks\":[...]} (%v)\nstdout:\n%s\nstderr:\n%s", strings.Join(r.args, " "), err, r.out, r.errOut)
	}
	problems := 0
	for _, it := range r.Checks {
		if it.Verdict == lancheck.Problem {
			problems++
		}
		switch it.Verdict {
		case lancheck.OK, lancheck.Problem, lancheck.Unknown:
		default:
			t.Errorf("item %s/%s: verdict %q is not ok, problem or unknown", it.Check, it.Family, it.Verdict)
		}
		if it.Verdict == lancheck.Problem && it.Fix == "" {
			t.Errorf("item %s/%s says problem without a fix: %+v", it.Check, it.Family, it)
		}
	}
	if want := map[bool]int{false: 0, true: 1}[problems > 0]; r.code != want {
		t.Errorf("exit %d with %d items saying problem, want %d%s", r.code, problems, want, r.once())
	}
	return r
}

func (r *lanRun) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "underlay %s (exit %d, %s):\n", strings.Join(r.args, " "), r.code, r.took.Round(time.Millisecond))
	for _, it := range r.Checks {
		fmt.Fprintf(&b, "  %-8s %-4s %-7s %s | fix: %s\n", it.Check, it.Family, it.Verdict, it.Evidence, it.Fix)
	}
	if r.errOut != "" {
		fmt.Fprintf(&b, "stderr:\n%s", r.errOut)
	}
	return b.String()
}

// item returns the check's item of family ("" for the checks without).
func (r *lanRun) item(t *testing.T, check lancheck.Check, family string) lancheck.Item {
	t.Helper()
	for _, it := range r.Checks {
		if it.Check == check && it.Family == family {
			return it
		}
	}
	t.Fatalf("no item %s (family %q) in the report%s", check, family, r.once())
	return lancheck.Item{}
}

// want fails unless the check's item of family says verdict and its
// evidence and fix, together, contain each of mention (case-insensitive).
func (r *lanRun) want(t *testing.T, check lancheck.Check, family string, verdict lancheck.Verdict, mention ...string) lancheck.Item {
	t.Helper()
	it := r.item(t, check, family)
	if it.Verdict != verdict {
		t.Errorf("%s %s: verdict %s, want %s%s", check, family, it.Verdict, verdict, r.once())
		return it
	}
	text := strings.ToLower(it.Evidence + " " + it.Fix)
	for _, m := range mention {
		if !strings.Contains(text, strings.ToLower(m)) {
			t.Errorf("%s %s (%s): evidence and fix do not mention %q%s", check, family, verdict, m, r.once())
		}
	}
	return it
}

// once is the report, for the first failure's message; "" afterwards.
func (r *lanRun) once() string {
	if r.shown {
		return ""
	}
	r.shown = true
	return "\n" + r.String()
}

// newLAN is a near namespace with the parent lanParent on a fresh switch.
func newLAN(t *testing.T, n int) *itest.SwitchLAN {
	t.Helper()
	return itest.NewSwitchLAN(t, itest.NewNetns(t), lanParent, n)
}

// new-mac: from a fresh MAC the gateway answers on an open switch (ok); a
// switch with port security on the parent's port drops the new MAC's
// probe while the parent's is answered (problem, exit 1, the fix is
// ipvlan, whose children share the parent's MAC).
func TestLANCheckNewMAC(t *testing.T) {
	t.Parallel()
	for _, secure := range []bool{false, true} {
		t.Run(map[bool]string{false: "open", true: "port-security"}[secure], func(t *testing.T) {
			t.Parallel()
			lan := newLAN(t, 10)
			gw := lan.Gateway()
			lan.ParentAddrs(gw.Addr4.Addr(), gw.Addr6.Addr())
			var ps *itest.PortSecurity
			if secure {
				ps = lan.PortSecurity()
			}
			r := doctorLAN(t, lan.Near, lanParent)
			if !secure {
				r.want(t, lancheck.NewMAC, "", lancheck.OK)
				return
			}
			// The parent's answer is the gateway's (not the new MAC's own
			// probe, seen on the parent at the same time).
			r.want(t, lancheck.NewMAC, "", lancheck.Problem, "ipvlan", gw.MAC.String())
			if r.code != 1 {
				t.Errorf("exit %d with new-mac a problem, want 1", r.code)
			}
			if ps.Dropped() == 0 {
				t.Errorf("port security dropped nothing: the command sent nothing from a new MAC%s", r.once())
			}
		})
	}
}

// dhcp: one server is ok and named (server ID and MAC); none is a problem
// when the network takes its addresses from DHCP and unknown otherwise;
// two are a problem naming both. A DISCOVER leases nothing: no lease in
// any server's lease file afterwards.
func TestLANCheckDHCP(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		servers int
		opts    []string
		verdict lancheck.Verdict
	}{
		{"one-server", 1, []string{"-o", "dhcp=true"}, lancheck.OK},
		{"no-server", 0, []string{"-o", "dhcp=true"}, lancheck.Problem},
		{"no-server-no-dhcp", 0, nil, lancheck.Unknown},
		{"two-servers", 2, []string{"-o", "dhcp=true"}, lancheck.Problem},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			lan := newLAN(t, 20+i)
			var hosts []*itest.LANHost
			var servers []*itest.Dnsmasq
			var mention []string
			for k := range c.servers {
				h := lan.Host(fmt.Sprintf("dhcp%d", k), 3+k)
				hosts = append(hosts, h)
				servers = append(servers, h.Dnsmasq(itest.LANDnsmasq{V4: true}))
				mention = append(mention, h.Addr4.Addr().String(), h.MAC.String())
			}
			r := doctorLAN(t, lan.Near, lanParent, c.opts...)
			r.want(t, lancheck.DHCP, "", c.verdict, mention...)
			if c.verdict == lancheck.Problem && r.code != 1 {
				t.Errorf("exit %d with dhcp a problem, want 1", r.code)
			}
			// Each server saw the DISCOVER, none a REQUEST; no lease
			// appears within a second of the end (dnsmasq writes its
			// lease file after it answers).
			for k, d := range servers {
				if !itest.WaitFor(2*time.Second, func() bool { return strings.Contains(d.Log(), "DHCPDISCOVER("+itest.LANHostLink+")") }) {
					t.Errorf("server %s logged no DISCOVER:\n%s", hosts[k].Addr4.Addr(), d.Log())
				}
			}
			time.Sleep(time.Until(r.end.Add(time.Second)))
			for k, d := range servers {
				if l := d.Leases(); len(l) != 0 {
					t.Errorf("server %s holds leases after the run: %+v", hosts[k].Addr4.Addr(), l)
				}
				if strings.Contains(d.Log(), "DHCPREQUEST") {
					t.Errorf("server %s was sent a REQUEST:\n%s", hosts[k].Addr4.Addr(), d.Log())
				}
			}
		})
	}
}

// ipv6-ra: an RA with an autonomous prefix and neither M nor O (dnsmasq
// ra-only) fits slaac (ok); no RA with slaac is a problem, and so is an
// RA whose prefix is not autonomous (dnsmasq's DHCPv6 range: M, L only);
// the ra-only RA without M for dhcpv6 is a problem, and so is dhcpv6 with
// no server answering the Solicit. A DHCPv6 range (M) fits dhcpv6:
// TestLANCheckWire.
func TestLANCheckIPv6RA(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, ra, mode  string
		verdict, dhcpv6 lancheck.Verdict
	}{
		{"ra-only-slaac", "ra-only", "slaac", lancheck.OK, ""},
		{"none-slaac", "", "slaac", lancheck.Problem, ""},
		{"ra-only-dhcpv6", "ra-only", "dhcpv6", lancheck.Problem, lancheck.Problem},
		// M and a prefix without the A flag: nothing to autoconfigure.
		{"dhcpv6-range-slaac", "dhcpv6", "slaac", lancheck.Problem, ""},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			lan := newLAN(t, 30+i)
			if c.ra != "" {
				lan.Host("rtr", 1).Dnsmasq(itest.LANDnsmasq{V6: c.ra})
			}
			r := doctorLAN(t, lan.Near, lanParent, "-o", "ipv6_mode="+c.mode)
			r.want(t, lancheck.IPv6RA, "", c.verdict)
			if c.dhcpv6 != "" {
				r.want(t, lancheck.DHCPv6, "", c.dhcpv6)
			}
			if c.verdict == lancheck.Problem && r.code != 1 {
				t.Errorf("exit %d with ipv6-ra a problem, want 1", r.code)
			}
		})
	}
}

// gateway: the host's default routes through the parent lead to a
// gateway that answers ARP and NDP (ok, per family); to one that no one
// holds (problem, per family); a network's gateway that no one holds is a
// problem even while the host's gateway answers; with no gateway known at
// all (no route, no network, no DHCP offer) the verdict is unknown.
func TestLANCheckGateway(t *testing.T) {
	t.Parallel()
	t.Run("present", func(t *testing.T) {
		t.Parallel()
		lan := newLAN(t, 40)
		gw := lan.Gateway()
		gw.Dnsmasq(itest.LANDnsmasq{V6: "ra-only"}) // a router: ipv6_mode=slaac fits
		lan.ParentAddrs(gw.Addr4.Addr(), gw.Addr6.Addr())
		r := doctorLAN(t, lan.Near, lanParent, "-o", "ipv6_mode=slaac")
		r.want(t, lancheck.Gateway, "ipv4", lancheck.OK, gw.Addr4.Addr().String(), gw.MAC.String())
		// The host's default route via 2001:db8:N::1 or the one the RA
		// made via the router's link-local address: both are gw.
		r.want(t, lancheck.Gateway, "ipv6", lancheck.OK, gw.MAC.String())
	})
	t.Run("absent", func(t *testing.T) {
		t.Parallel()
		lan := newLAN(t, 41)
		gw4, gw6 := lan.Addr4(1).Addr(), lan.Addr6(1).Addr()
		lan.ParentAddrs(gw4, gw6)
		r := doctorLAN(t, lan.Near, lanParent, "-o", "ipv6_mode=slaac") // an IPv6 network: a gateway item per family
		r.want(t, lancheck.Gateway, "ipv4", lancheck.Problem, gw4.String())
		r.want(t, lancheck.Gateway, "ipv6", lancheck.Problem, gw6.String())
		// No one answers the parent nor the new MAC: nothing to compare.
		// (The throwaway child's own ARP probe, sent while the parent's
		// waits, is no answer.)
		r.want(t, lancheck.NewMAC, "", lancheck.Unknown)
		if r.code != 1 {
			t.Errorf("exit %d with the gateway a problem, want 1", r.code)
		}
	})
	t.Run("network-gateway-absent", func(t *testing.T) {
		t.Parallel()
		lan := newLAN(t, 42)
		lan.Gateway() // the LAN's gateway is .1; the network says .99
		d := itest.StartDaemon(t, lan.Near, itest.DaemonOptions{Args: []string{"--docker-host", "unix:///nonexistent/docker.sock"}})
		missing := lan.Addr4(99)
		d.MustCreateNetwork(itest.Net{ID: netA, Opts: map[string]string{"parent": lanParent, "lan_check": "false"},
			V4: []string{lan.Net4.String() + "," + missing.String()}})
		r := doctorLAN(t, lan.Near, lanParent, "--network", netA, "--socket", d.Socket)
		r.want(t, lancheck.Gateway, "ipv4", lancheck.Problem, missing.Addr().String())
	})
	t.Run("unknown", func(t *testing.T) {
		t.Parallel()
		lan := newLAN(t, 43)
		r := doctorLAN(t, lan.Near, lanParent)
		r.want(t, lancheck.Gateway, "ipv4", lancheck.Unknown)
		for _, it := range r.Checks {
			if it.Check == lancheck.Gateway && it.Verdict != lancheck.Unknown {
				t.Errorf("gateway %s: %s with no gateway known, want unknown%s", it.Family, it.Verdict, r.once())
			}
		}
	})
}

// mtu: -o mtu larger than the parent's MTU is a problem; equal or smaller
// is ok.
func TestLANCheckMTU(t *testing.T) {
	t.Parallel()
	cases := []struct {
		parent, opt int
		verdict     lancheck.Verdict
	}{
		{1500, 9000, lancheck.Problem},
		{1400, 1500, lancheck.Problem},
		{1500, 1500, lancheck.OK},
		{1500, 1400, lancheck.OK},
	}
	for i, c := range cases {
		t.Run(fmt.Sprintf("parent-%d-mtu-%d", c.parent, c.opt), func(t *testing.T) {
			t.Parallel()
			lan := newLAN(t, 50+i)
			if c.parent != 1500 {
				lan.SetParentMTU(c.parent)
			}
			r := doctorLAN(t, lan.Near, lanParent, "-o", fmt.Sprintf("mtu=%d", c.opt))
			r.want(t, lancheck.MTU, "", c.verdict, fmt.Sprint(c.parent))
			if c.verdict == lancheck.Problem && r.code != 1 {
				t.Errorf("exit %d with mtu a problem, want 1", r.code)
			}
		})
	}
}

// parent: a parent that is down, or missing, is a problem (exit 1, not
// 2: the command ran, and the parent is what it found wrong); an up one
// with carrier is ok (TestLANCheckWire).
func TestLANCheckParent(t *testing.T) {
	t.Parallel()
	t.Run("down", func(t *testing.T) {
		t.Parallel()
		lan := newLAN(t, 60)
		lan.ParentDown()
		r := doctorLAN(t, lan.Near, lanParent)
		r.want(t, lancheck.Parent, "", lancheck.Problem, lanParent)
		if r.code != 1 {
			t.Errorf("exit %d with a down parent, want 1", r.code)
		}
	})
	t.Run("missing", func(t *testing.T) {
		t.Parallel()
		ns := itest.NewNetns(t)
		r := doctorLAN(t, ns, "nosuch0")
		r.want(t, lancheck.Parent, "", lancheck.Problem, "nosuch0")
		if r.code != 1 {
			t.Errorf("exit %d with a missing parent, want 1", r.code)
		}
	})
}

// Serial: its assertion is a timing bound. --timeout bounds the whole
// run, on a LAN whose every server answers (the collectors could wait for
// more): a run with --timeout 2s ends within 2 s and 1 s of start-up.
func TestLANCheckTimeout(t *testing.T) {
	lan := newLAN(t, 90)
	lan.Host("rtr", 1).Dnsmasq(itest.LANDnsmasq{V4: true, V6: "dhcpv6"})
	bin := itest.Binary(t)
	args := []string{"doctor", "--lan", lanParent, "--json", "--timeout", "2s", "-o", "dhcp=true", "-o", "ipv6_mode=dhcpv6"}
	start := time.Now()
	out, errOut, code := itest.RunIn(t, lan.Near, time.Minute, []string{"DOCKER_HOST=unix:///nonexistent/docker.sock"}, bin, args...)
	took := time.Since(start)
	t.Logf("underlay %s: exit %d in %s", strings.Join(args, " "), code, took.Round(time.Millisecond))
	if code != 0 || took > 3*time.Second {
		t.Errorf("underlay %s: exit %d in %s, want 0 within 2s and 1s of start-up\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, took.Round(time.Millisecond), out, errOut)
	}
}

// Bad usage cannot run: exit 2, saying what is wrong on stderr.
func TestLANCheckUsage(t *testing.T) {
	t.Parallel()
	lan := newLAN(t, 70)
	for _, c := range []struct {
		args    []string
		mention string
	}{
		{[]string{"doctor", "--lan"}, "lan"},
		{[]string{"doctor", "--lan", lanParent, "-o", "bogus=1"}, "bogus"},
		{[]string{"doctor", "--lan", lanParent, "-o", "mtu=big"}, "mtu"},
	} {
		out, errOut, code := itest.RunIn(t, lan.Near, time.Minute, []string{"DOCKER_HOST=unix:///nonexistent/docker.sock"}, itest.Binary(t), c.args...)
		if code != 2 || !strings.Contains(errOut, c.mention) {
			t.Errorf("underlay %s: exit %d, want 2 naming %q\nstdout:\n%s\nstderr:\n%s", strings.Join(c.args, " "), code, c.mention, out, errOut)
		}
	}
}

// On a healthy LAN (one router: gateway, DHCPv4 server, RAs with M and a
// DHCPv6 server) every check is ok or unknown and the command exits 0;
// what it put on the wire, as the switch saw it on the parent's port, is
// only what a host joining a LAN sends (ARP requests and probes, never an
// announcement nor a reply; router and neighbour solicitations and MLD
// reports; DHCP DISCOVERs; DHCPv6 Solicits), under 300 frames, the new
// MAC a locally administered one; no server leased anything; afterwards
// no link with underlay's mark is in the near namespace, and the new MAC
// is in no namespace this process can reach.
func TestLANCheckWire(t *testing.T) {
	t.Parallel()
	lan := newLAN(t, 80)
	rtr := lan.Host("rtr", 1)
	d := rtr.Dnsmasq(itest.LANDnsmasq{V4: true, V6: "dhcpv6"})
	// The parent takes the router's RA: the host's IPv6 default route.
	parent := lan.Near.MustLink(lanParent)
	if !itest.WaitFor(10*time.Second, func() bool {
		rs, _ := lan.Near.NL.RouteList(parent, unix.AF_INET6)
		for _, r := range rs {
			if ones, _ := ipNetOnes(r.Dst); ones == 0 && r.Gw != nil {
				return true
			}
		}
		return false
	}) {
		t.Fatalf("no IPv6 default route through %s from the router's RA within 10s", lanParent)
	}
	capture := lan.Capture()
	r := doctorLAN(t, lan.Near, lanParent, "-o", "dhcp=true", "-o", "ipv6_mode=dhcpv6")
	if r.code != 0 {
		t.Errorf("exit %d on a healthy LAN, want 0%s", r.code, r.once())
	}
	for _, c := range []lancheck.Check{lancheck.Parent, lancheck.MTU, lancheck.NewMAC, lancheck.DHCP, lancheck.IPv6RA, lancheck.DHCPv6} {
		r.want(t, c, "", lancheck.OK)
	}
	r.want(t, lancheck.DHCP, "", lancheck.OK, rtr.Addr4.Addr().String(), rtr.MAC.String())
	r.want(t, lancheck.Gateway, "ipv4", lancheck.OK, rtr.Addr4.Addr().String())
	r.want(t, lancheck.Gateway, "ipv6", lancheck.OK)

	// The wire, up to the command's exit.
	var frames []itest.Frame
	for _, f := range lan.FromNear(capture) {
		if !f.At.After(r.end) {
			frames = append(frames, f)
		}
	}
	if len(frames) >= 300 {
		t.Errorf("the near side sent %d frames during the run, want fewer than 300", len(frames))
	}
	seen := map[string]int{}
	fresh := map[string]net.HardwareAddr{}
	for _, f := range frames {
		w := itest.ReadWire(f.B)
		if !bytes.Equal(w.Src, lan.ParentMAC) {
			if w.Src[0]&0x02 == 0 || w.Src[0]&0x01 != 0 {
				t.Errorf("a frame from %s, neither the parent's MAC %s nor a locally administered unicast one: %s", w.Src, lan.ParentMAC, w)
			}
			fresh[w.Src.String()] = w.Src
		}
		from := "parent"
		if !bytes.Equal(w.Src, lan.ParentMAC) {
			from = "new MAC"
		}
		var what string
		switch {
		case w.Kind == "arp" && w.Type == 1 && w.ARP.SPA != w.ARP.TPA:
			what = "ARP request"
			if w.ARP.SPA.IsUnspecified() {
				what = "ARP probe"
			}
		case w.Kind == "icmpv6" && w.Type == 133:
			what = "router solicitation"
		case w.Kind == "icmpv6" && w.Type == 135:
			what = "neighbour solicitation"
		case w.Kind == "icmpv6" && (w.Type == 143 || w.Type == 131):
			what = "MLD report"
		case w.Kind == "icmpv6" && w.Type == 136 && solicitedNA(f.B):
			// The DHCPv6 collector answers the server's solicitation for
			// the throwaway client's link-local address (package dhcp6:
			// else the Advertise could not be sent to it): a solicited
			// advertisement, unicast, for the sender's own address; never
			// an unsolicited one.
			what = "solicited neighbour advertisement"
		case w.Kind == "dhcp" && w.Type == int(dhcpv4.MessageTypeDiscover):
			what = "DHCP DISCOVER"
		case w.Kind == "dhcpv6" && w.Type == 1:
			what = "DHCPv6 Solicit"
		default:
			t.Errorf("the near side sent what a host joining a LAN does not: %s (%s)", w, f.At.Format("15:04:05.000"))
			continue
		}
		seen[what+" from the "+from]++
	}
	var freshList []string
	for m := range fresh {
		freshList = append(freshList, m)
	}
	t.Logf("the near side sent %d frames: %v; new MACs %v", len(frames), seen, freshList)
	// What the checks that said ok must have sent (the DHCP clients'
	// messages from the parent's MAC or a new one: chaddr and the DUID
	// carry the throwaway MAC either way).
	for _, want := range [][]string{{"ARP probe from the parent"}, {"ARP probe from the new MAC"},
		{"router solicitation from the parent", "router solicitation from the new MAC"},
		{"DHCP DISCOVER from the new MAC", "DHCP DISCOVER from the parent"},
		{"DHCPv6 Solicit from the new MAC", "DHCPv6 Solicit from the parent"}} {
		n := 0
		for _, w := range want {
			n += seen[w]
		}
		if n == 0 {
			t.Errorf("no %s on the wire: the capture or the command is wrong", strings.Join(want, " nor "))
		}
	}

	// Nothing leased, nothing left.
	time.Sleep(time.Until(r.end.Add(time.Second)))
	if l := d.Leases(); len(l) != 0 {
		t.Errorf("the router's dnsmasq holds leases after the run: %+v", l)
	}
	if log := d.Log(); strings.Contains(log, "DHCPREQUEST") {
		t.Errorf("the router's dnsmasq was asked to lease:\n%s", log)
	}
	links, err := lan.Near.NL.LinkList()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range links {
		if strings.HasPrefix(l.Attrs().Alias, kernel.MarkPrefix) || l.Attrs().Name != "lo" && l.Attrs().Name != lanParent {
			t.Errorf("link %s (%s, alias %q) is left in the near namespace", l.Attrs().Name, l.Type(), l.Attrs().Alias)
		}
	}
	for _, mac := range fresh {
		var where []string
		if !itest.WaitFor(3*time.Second, func() bool { where = itest.LinksWithMAC(mac); return len(where) == 0 }) {
			t.Errorf("the new MAC %s is still on a link after the run: %v", mac, where)
		}
	}
}

// ipNetOnes is a route destination's prefix length (0 for a default
// route, whose Dst netlink gives as nil or as ::/0).
func ipNetOnes(n *net.IPNet) (int, int) {
	if n == nil {
		return 0, 0
	}
	return n.Mask.Size()
}

// solicitedNA reports whether an Ethernet/IPv6 Neighbour Advertisement
// answers a solicitation: the S flag set, unicast to the solicitor, for
// its own source address.
func solicitedNA(b []byte) bool {
	na, ok := itest.ReadNDP(b)
	return ok && na.Type == 136 && na.Flags&0x40 != 0 && !na.Dst.IsMulticast() && na.EthDst[0]&1 == 0 && na.Target == na.Src
}
