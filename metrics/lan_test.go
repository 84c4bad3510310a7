package metrics

import (
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// lanCounts is a LANChecks whose counts a test sets.
type lanCounts struct {
	mu sync.Mutex
	c  map[[2]string]int
}

func (l *lanCounts) LANCheckCounts() map[[2]string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[[2]string]int{}
	for k, v := range l.c {
		out[k] = v
	}
	return out
}

func TestLANCheckGauge(t *testing.T) {
	src := &lanCounts{c: map[[2]string]int{{"new-mac", "problem"}: 2, {"new-mac", "ok"}: 0, {"dhcp", "ok"}: 1}}
	m := New(Options{})
	if err := m.WatchLAN(src); err != nil {
		t.Fatal(err)
	}
	if err := m.WatchLAN(src); err == nil {
		t.Fatal("the LAN gauge registered twice")
	}
	const head = `
# HELP underlay_lan_check Networks whose latest LAN preflight (run in the background after their create) gave the verdict (ok, problem, unknown) for the check (new-mac, wireless, dhcp, ipv6-ra, dhcpv6, gateway, mtu, parent).
# TYPE underlay_lan_check gauge
`
	want := head + `underlay_lan_check{check="dhcp",verdict="ok"} 1
underlay_lan_check{check="new-mac",verdict="ok"} 0
underlay_lan_check{check="new-mac",verdict="problem"} 2
`
	if err := testutil.GatherAndCompare(m.Gatherer(), strings.NewReader(want), "underlay_lan_check"); err != nil {
		t.Fatal(err)
	}
	// Read at every scrape: a network deleted is no longer counted.
	src.mu.Lock()
	src.c[[2]string{"new-mac", "problem"}] = 1
	src.mu.Unlock()
	want = head + `underlay_lan_check{check="dhcp",verdict="ok"} 1
underlay_lan_check{check="new-mac",verdict="ok"} 0
underlay_lan_check{check="new-mac",verdict="problem"} 1
`
	if err := testutil.GatherAndCompare(m.Gatherer(), strings.NewReader(want), "underlay_lan_check"); err != nil {
		t.Fatal(err)
	}
	if code, text := scrape(t, m.Handler()); code != 200 || !strings.Contains(text, `underlay_lan_check{check="new-mac",verdict="problem"} 1`+"\n") {
		t.Errorf("scrape (%d) lacks the gauge:\n%s", code, text)
	}
}
