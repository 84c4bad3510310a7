package control

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/underlay-net/underlay/doctor"
	"github.com/underlay-net/underlay/internal/pluginapi"
	"github.com/underlay-net/underlay/lancheck"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/underlay-net/underlay/store/record"
)

// TestListingLANChecks: a network's latest LAN preflight is in ls: its
// items in JSON (lan_checks), and in the networks' table a LAN column
// naming the checks with problems, ok, unknown, or - without one.
func TestListingLANChecks(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	nets := []record.Network{
		{ID: "aaaaaaaaaaaa1", Type: "macvlan", Mode: "bridge", Parent: "eth0", Options: map[string]string{"parent": "eth0"}},
		{ID: "bbbbbbbbbbbb2", Type: "ipvlan", Mode: "l2", Parent: "eth1", Options: map[string]string{"parent": "eth1"}},
		{ID: "cccccccccccc3", Type: "ipvlan", Mode: "l2", Parent: "eth2", Options: map[string]string{"parent": "eth2"}},
		{ID: "dddddddddddd4", Type: "ipvlan", Mode: "l2", Parent: "eth3", Options: map[string]string{"parent": "eth3"}},
	}
	st := State{Version: "v1", Inventory: doctor.Inventory{Now: now, Networks: nets, LAN: map[string][]lancheck.Item{
		"aaaaaaaaaaaa1": {
			{Check: lancheck.NewMAC, Verdict: lancheck.Problem, Evidence: "the gateway answered eth0 but not a new MAC", Fix: "use -o type=ipvlan"},
			{Check: lancheck.DHCP, Family: "ipv4", Verdict: lancheck.Problem, Evidence: "two DHCP servers answered", Fix: "find the rogue one"},
			{Check: lancheck.Gateway, Family: "ipv4", Verdict: lancheck.Problem, Evidence: "198.18.1.1 did not answer", Fix: "check the gateway"},
			{Check: lancheck.Gateway, Family: "ipv6", Verdict: lancheck.Problem, Evidence: "2001:db8::1 did not answer", Fix: "check the gateway"},
			{Check: lancheck.MTU, Verdict: lancheck.OK, Evidence: "1500"},
		},
		"bbbbbbbbbbbb2": {{Check: lancheck.NewMAC, Verdict: lancheck.OK, Evidence: "answered"}, {Check: lancheck.IPv6RA, Verdict: lancheck.Unknown, Evidence: "none seen"}},
		"cccccccccccc3": {{Check: lancheck.DHCP, Verdict: lancheck.Unknown, Evidence: "none answered; the network does not use DHCP"}},
	}}}
	l := listing(st, dockerView{})
	if len(l.Networks[0].LANChecks) != 5 || l.Networks[0].LANChecks[1].Family != "ipv4" || l.Networks[3].LANChecks != nil {
		t.Fatalf("lan checks %+v", l.Networks)
	}
	b, err := json.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	js := string(b)
	for _, want := range []string{
		`"lan_checks":[{"check":"new-mac","verdict":"problem","evidence":"the gateway answered eth0 but not a new MAC","fix":"use -o type=ipvlan"},{"check":"dhcp","family":"ipv4","verdict":"problem"`,
		`"lan_checks":[{"check":"dhcp","verdict":"unknown","evidence":"none answered; the network does not use DHCP","fix":""}]`} {
		if !strings.Contains(js, want) {
			t.Errorf("ls --json lacks %s:\n%s", want, js)
		}
	}
	if strings.Count(js, `"lan_checks"`) != 3 {
		t.Errorf("ls --json has lan_checks for a network without a preflight:\n%s", js)
	}
	var buf bytes.Buffer
	printListing(&buf, l)
	lines := strings.Split(buf.String(), "\n")
	if !strings.HasSuffix(strings.TrimSpace(lines[0]), "PENDING UNTIL  LAN") {
		t.Errorf("header %q lacks the LAN column", lines[0])
	}
	for i, want := range []string{"problem new-mac,dhcp,gateway", "ok", "unknown", "-"} {
		if !strings.HasSuffix(strings.TrimSpace(lines[1+i]), "  "+want) {
			t.Errorf("row %d %q does not end with LAN %q", i, lines[1+i], want)
		}
	}
}

// TestDoctorReportsLANProblems: each problem of a network's latest LAN
// preflight is a lan-check finding (the evidence, the fix), exit 1 as any
// finding, in JSON too; --repair asks the daemon for nothing.
func TestDoctorReportsLANProblems(t *testing.T) {
	now := time.Now()
	const id = "aaaaaaaaaaaa0000000000000000000000000000000000000000000000000001"
	var repairs atomic.Int32
	daemon := serveUnix(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == PathRepair {
			repairs.Add(1)
		}
		pluginapi.WriteJSON(w, http.StatusOK, State{Version: "test", Inventory: doctor.Inventory{Now: now, Grace: time.Hour,
			Networks: []record.Network{{ID: id, Type: "macvlan", Mode: "bridge", Parent: "eth0", Created: now}},
			Links:    []kernel.Link{{Name: "eth0"}},
			LAN: map[string][]lancheck.Item{id: {
				{Check: lancheck.NewMAC, Verdict: lancheck.Problem, Evidence: "198.18.1.1 answered eth0 but not a new MAC", Fix: "use -o type=ipvlan -o ipvlan_mode=l2"},
				{Check: lancheck.DHCP, Verdict: lancheck.Unknown, Evidence: "no DHCP server answered"},
				{Check: lancheck.MTU, Verdict: lancheck.OK, Evidence: "1500 both"},
			}}}})
	}))
	docker := serveUnix(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Api-Version", "1.47")
		_, _ = w.Write([]byte("[]"))
	}))
	run := func(args ...string) (string, string, int) {
		var out, errOut bytes.Buffer
		code := RunDoctor(append([]string{"--socket", daemon, "--docker-host", "unix://" + docker}, args...), &out, &errOut)
		return out.String(), errOut.String(), code
	}
	out, errOut, code := run()
	want := "lan-check " + id + ": new-mac: 198.18.1.1 answered eth0 but not a new MAC. --repair: none by underlay: use -o type=ipvlan -o ipvlan_mode=l2\n"
	if code != ExitFindings || !strings.Contains(out, want) || strings.Count(out, "lan-check") != 1 || !strings.Contains(out, "1 findings") {
		t.Errorf("exit %d, want %d and one finding %q:\n%s%s", code, ExitFindings, want, out, errOut)
	}
	out, _, code = run("--json")
	var r Report
	if err := json.Unmarshal([]byte(out), &r); err != nil || code != ExitFindings || len(r.Findings) != 1 {
		t.Fatalf("--json: exit %d, %+v, %v\n%s", code, r, err, out)
	}
	if f := r.Findings[0]; f.Kind != "lan-check" || f.Subject != id || f.Message != "new-mac: 198.18.1.1 answered eth0 but not a new MAC" || f.Repair != "none by underlay: use -o type=ipvlan -o ipvlan_mode=l2" || f.Action != nil {
		t.Errorf("finding %+v", f)
	}
	_, _, code = run("--repair")
	if code != ExitFindings || repairs.Load() != 0 {
		t.Errorf("--repair: exit %d, %d repairs asked; want %d and none", code, repairs.Load(), ExitFindings)
	}
}
