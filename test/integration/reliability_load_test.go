package integration

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docker/go-plugins-helpers/network"
	"github.com/underlay-net/underlay/internal/itest"
)

// parents makes n veth parents vp0..vp(n-1) in ns and returns their names.
func parents(ns *itest.Netns, n int) []string {
	var out []string
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("vp%d", i)
		ns.AddVeth(name, name+"-peer", 1500)
		out = append(out, name)
	}
	return out
}

// subnet30 returns the i-th /30 of 198.18.0.0/15.
func subnet30(i int) string {
	a := i * 4
	return fmt.Sprintf("198.%d.%d.%d/30", 18+a>>16, a>>8&255, a&255)
}

func hexID(prefix string, i int) string { return fmt.Sprintf("%s%011x%052d", prefix, i, 0) }

// TestKillUnderLoad runs several clients through create/endpoint/join/
// leave/delete cycles on several parents while the daemon is SIGKILLed at
// random moments and restarted, for many rounds. Afterwards, deleting
// every endpoint and network ever requested leaves no link and no record,
// and an exclusive network on each parent succeeds.
func TestKillUnderLoad(t *testing.T) {
	// Serial: a load test (4 clients, 30 rounds of SIGKILL).
	ns := itest.NewNetns(t)
	ps := parents(ns, 4)
	d := itest.StartDaemon(t, ns, itest.DaemonOptions{})
	rounds := 30
	if itest.InVM() {
		rounds = 4 // software-emulated: fewer rounds, same checks
	}
	var (
		mu       sync.Mutex
		nets     = map[string]bool{}
		eps      = map[string]string{} // endpoint -> network
		served   atomic.Int64
		stop     atomic.Bool
		clientWG sync.WaitGroup
	)
	client := func(c int) {
		defer clientWG.Done()
		for cycle := 0; !stop.Load(); cycle++ {
			netID := hexID(fmt.Sprintf("%x", c), cycle)
			epID := hexID(fmt.Sprintf("e%x", c), cycle)
			parent := ps[c%len(ps)]
			mu.Lock()
			nets[netID], eps[epID] = true, netID
			mu.Unlock()
			steps := []struct {
				route string
				req   any
			}{
				{"CreateNetwork", itest.Net{ID: netID, Opts: map[string]string{"parent": parent}, V4: []string{subnet30(c*4096 + cycle)}}.Request()},
				{"CreateEndpoint", network.CreateEndpointRequest{NetworkID: netID, EndpointID: epID, Interface: &network.EndpointInterface{}}},
				{"Join", network.JoinRequest{NetworkID: netID, EndpointID: epID}},
				{"Leave", network.LeaveRequest{NetworkID: netID, EndpointID: epID}},
				{"DeleteEndpoint", network.DeleteEndpointRequest{NetworkID: netID, EndpointID: epID}},
				{"DeleteNetwork", network.DeleteNetworkRequest{NetworkID: netID}},
			}
			for _, s := range steps {
				code, body, err := d.Post("/NetworkDriver."+s.route, s.req)
				if err != nil {
					time.Sleep(20 * time.Millisecond) // the daemon is down: abandon the cycle
					break
				}
				if code != 200 {
					// Only refusals Docker could see in real life are allowed:
					// none here, since every cycle uses its own subnet.
					if !strings.Contains(string(body), "unknown to underlay") {
						t.Errorf("%s %s: %d %s", s.route, netID[:12], code, body)
					}
					break
				}
				served.Add(1)
			}
		}
	}
	for c := 0; c < 4; c++ {
		clientWG.Add(1)
		go client(c)
	}
	for r := 0; r < rounds; r++ {
		time.Sleep(time.Duration(50+rand.IntN(250)) * time.Millisecond)
		d.Kill()
		time.Sleep(time.Duration(rand.IntN(50)) * time.Millisecond)
		d.Start()
	}
	stop.Store(true)
	clientWG.Wait()
	t.Logf("%d rounds of SIGKILL, %d requests served, %d networks requested", rounds, served.Load(), len(nets))
	d.CheckConsistent()

	for ep, netID := range eps {
		d.MustCall("Leave", network.LeaveRequest{NetworkID: netID, EndpointID: ep}, nil)
		d.MustCall("DeleteEndpoint", network.DeleteEndpointRequest{NetworkID: netID, EndpointID: ep}, nil)
	}
	for netID := range nets {
		d.DeleteNetwork(netID)
	}
	links := []string{"lo"}
	for _, p := range ps {
		links = append(links, p, p+"-peer")
	}
	ns.WantLinks(links...)
	d.CheckConsistent().WantEmpty(t)
	for i, p := range ps {
		d.MustCreateNetwork(itest.Net{ID: hexID("f", i), Opts: map[string]string{"parent": p, "macvlan_mode": "passthru"}, V4: []string{"198.19.0.0/16"}})
	}
}

// TestRaceRepeated: 64 concurrent CreateNetwork calls with conflicting
// configurations on one parent, many times: exactly one wins, every loser
// gets the conflict error naming it, nothing leaks.
func TestRaceRepeated(t *testing.T) {
	// Serial: a load test (20 trials of 64 concurrent creates).
	ns, d := setup(t, itest.DaemonOptions{})
	trials := 20
	if itest.InVM() {
		trials = 5
	}
	for trial := 0; trial < trials; trial++ {
		msgs := itest.Concurrently(64, func(i int) string {
			opts := map[string]string{"parent": "vp0"}
			switch i % 3 { // three ways to conflict
			case 1:
				opts["macvlan_mode"] = "passthru"
			case 2:
				opts["type"] = "ipvlan"
			}
			return d.CreateNetwork(itest.Net{ID: hexID("a", trial*64+i), Opts: opts, V4: []string{"198.18.1.0/24"}})
		})
		winner := -1
		for i, msg := range msgs {
			if msg == "" {
				if winner >= 0 {
					t.Fatalf("trial %d: two winners, %d and %d", trial, winner, i)
				}
				winner = i
			}
		}
		if winner < 0 {
			t.Fatalf("trial %d: no winner: %q", trial, msgs[0])
		}
		w := hexID("a", trial*64+winner)
		for i, msg := range msgs {
			if i != winner && !strings.Contains(msg, "already used by network "+w[:12]) {
				t.Fatalf("trial %d: loser %d answered %q", trial, i, msg)
			}
		}
		d.DeleteNetwork(w)
		ns.WantLinks(base...)
	}
	d.CheckConsistent().WantEmpty(t)
	t.Logf("%d race trials of 64 concurrent conflicting creates", trials)
}

// TestConcurrentCreatesAndDeletesOverManyParents: compatible networks
// created and deleted concurrently on many parents stay consistent.
func TestConcurrentCreatesAndDeletesOverManyParents(t *testing.T) {
	// Serial: a load test (16 workers over 8 parents).
	ns := itest.NewNetns(t)
	ps := parents(ns, 8)
	d := itest.StartDaemon(t, ns, itest.DaemonOptions{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	kept := map[string]bool{}
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < 12; i++ {
				id := hexID(fmt.Sprintf("b%x", w), i)
				n := itest.Net{ID: id, Opts: map[string]string{"parent": ps[(w+i)%len(ps)]}, V4: []string{fmt.Sprintf("198.18.%d.%d/28", w, i*16)}}
				if msg := d.CreateNetwork(n); msg != "" {
					t.Errorf("create %s: %s", id[:12], msg)
					return
				}
				d.Endpoint(id, hexID(fmt.Sprintf("c%x", w), i), "", "", "")
				if i%3 == 0 {
					mu.Lock()
					kept[id] = true
					mu.Unlock()
					continue
				}
				d.RemoveEndpoint(id, hexID(fmt.Sprintf("c%x", w), i))
				d.DeleteNetwork(id)
			}
		}(w)
	}
	wg.Wait()
	s := d.CheckConsistent()
	if len(s.Networks) != len(kept) || len(s.Endpoints) != len(kept) {
		t.Fatalf("stored %d networks and %d endpoints, want %d each", len(s.Networks), len(s.Endpoints), len(kept))
	}
	for id := range kept {
		if _, ok := s.Networks[id]; !ok {
			t.Fatalf("network %s lost", id[:12])
		}
	}
}
