package integration

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/underlay-net/underlay/control"
	"github.com/underlay-net/underlay/internal/itest"
	"github.com/underlay-net/underlay/lancheck"
)

// The daemon's LAN preflight after a create, through the binary, on a
// switch with port security on the parent's port: the network is created
// at once (the check runs in the background), then its new-mac problem is
// logged once at WARN with the fix, counted by underlay_lan_check, shown by
// `underlay ls` (table and --json) and reported by `underlay doctor` as a
// lan-check finding (exit 1). A network with lan_check=false is not
// checked, and its frames never reach the switch from a new MAC.
func TestLANPreflightAtCreate(t *testing.T) {
	t.Parallel()
	lan := newLAN(t, 50)
	gw := lan.Gateway()
	ps := lan.PortSecurity()
	docker := itest.NewFakeDocker(t)
	d := itest.StartDaemon(t, lan.Near, itest.DaemonOptions{Args: []string{"--docker-host", docker.Host()}})

	// Off: nothing sent from a new MAC within the time a check would take.
	d.MustCreateNetwork(itest.Net{ID: netB, Opts: map[string]string{"parent": lanParent, "lan_check": "false"},
		V4: []string{lan.Net4.String() + "," + gw.Addr4.String()}})
	time.Sleep(lancheck.DefaultBudget / 2)
	if n := ps.Dropped(); n != 0 {
		t.Fatalf("lan_check=false: port security dropped %d frames from new MACs", n)
	}
	d.MustCall("DeleteNetwork", map[string]string{"NetworkID": netB}, nil)

	start := time.Now()
	d.MustCreateNetwork(itest.Net{ID: netA, Opts: map[string]string{"parent": lanParent},
		V4: []string{lan.Net4.String() + "," + gw.Addr4.String()}})
	if took := time.Since(start); took > time.Second {
		t.Errorf("CreateNetwork took %s: the preflight must not hold it", took)
	}
	docker.SetLive(netA)

	var entry control.NetworkEntry
	if !itest.WaitFor(15*time.Second, func() bool {
		out, _, code := cli(t, "ls", "--socket", d.Socket, "--docker-host", docker.Host(), "--json")
		var l control.Listing
		if code != 0 || json.Unmarshal([]byte(out), &l) != nil {
			return false
		}
		for _, n := range l.Networks {
			if n.ID == netA && len(n.LANChecks) > 0 {
				entry = n
				return true
			}
		}
		return false
	}) {
		t.Fatalf("ls --json never showed network A's LAN checks\n%s", d.Log())
	}
	var newMAC *lancheck.Item
	for i, it := range entry.LANChecks {
		if it.Check == lancheck.NewMAC {
			newMAC = &entry.LANChecks[i]
		}
	}
	if newMAC == nil || newMAC.Verdict != lancheck.Problem || !strings.Contains(newMAC.Fix, "ipvlan") || !strings.Contains(newMAC.Evidence, gw.MAC.String()) {
		t.Fatalf("ls --json: new-mac %+v, want a problem naming the gateway's MAC %s with the ipvlan fix; all: %+v", newMAC, gw.MAC, entry.LANChecks)
	}
	if ps.Dropped() == 0 {
		t.Errorf("port security dropped nothing: the preflight sent nothing from a new MAC")
	}

	table, _, _ := cli(t, "ls", "--socket", d.Socket, "--docker-host", docker.Host())
	if !strings.Contains(table, "new-mac") {
		t.Errorf("ls table does not show the problem:\n%s", table)
	}
	out, _, code := cli(t, "doctor", "--socket", d.Socket, "--docker-host", docker.Host(), "--json")
	var rep control.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != control.ExitFindings {
		t.Fatalf("doctor: exit %d (%v)\n%s", code, err, out)
	}
	found := false
	for _, f := range rep.Findings {
		found = found || (f.Kind == "lan-check" && f.Subject == netA && strings.Contains(f.Repair, "ipvlan"))
	}
	if !found {
		t.Errorf("doctor has no lan-check finding for network A: %+v", rep.Findings)
	}

	codeM, body, err := d.Get("/metrics")
	if err != nil || codeM != 200 {
		t.Fatalf("GET /metrics: %d %v", codeM, err)
	}
	m, err := itest.Metrics(string(body))
	if err != nil {
		t.Fatal(err)
	}
	if v := m[`underlay_lan_check{check="new-mac",verdict="problem"}`]; v != 1 {
		t.Errorf(`underlay_lan_check{check="new-mac",verdict="problem"} = %v, want 1`, v)
	}

	// One WARN line for the network, not one per check or per scrape.
	if !d.WaitLog(5*time.Second, "new-mac") {
		t.Fatalf("no log line names new-mac\n%s", d.Log())
	}
	warns := 0
	for _, line := range strings.Split(d.Log(), "\n") {
		if strings.Contains(line, "level=WARN") && strings.Contains(line, "new-mac") {
			warns++
		}
	}
	if warns != 1 {
		t.Errorf("%d WARN lines name new-mac, want 1\n%s", warns, d.Log())
	}
}
