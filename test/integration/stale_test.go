package integration

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/underlay-net/underlay/internal/itest"
)

// The stale-holder check of CreateNetwork (rule 4) against a fake Docker:
// what counts as Docker's "no such network", the grace period for holders
// libnetwork has not stored yet, and the bound on the whole check.

// grace is the driver's grace period for young holders.
const grace = 3 * time.Second

func passthru(id, subnet string) itest.Net {
	return itest.Net{ID: id, Opts: map[string]string{"parent": "vp0", "macvlan_mode": "passthru"}, V4: []string{subnet}}
}

func bridge(id, subnet string) itest.Net {
	return itest.Net{ID: id, Opts: map[string]string{"parent": "vp0"}, V4: []string{subnet}}
}

// wantRefusedNaming fails unless msg is a parent conflict on vp0 naming
// each holder with its fix.
func wantRefusedNaming(t *testing.T, what, msg string, holders ...string) {
	t.Helper()
	if !strings.Contains(msg, "parent vp0 is already used by") {
		t.Fatalf("%s answered %q, want a parent conflict on vp0", what, msg)
	}
	for _, h := range holders {
		if !strings.Contains(msg, "docker network rm "+h[:12]) {
			t.Fatalf("%s answered %q, want it to name holder %s with its fix", what, msg, h[:12])
		}
	}
}

// sleepUntilOld waits until networks whose create was answered at
// answered are older than the grace period.
func sleepUntilOld(answered time.Time) {
	time.Sleep(time.Until(answered.Add(grace + 200*time.Millisecond)))
}

// timedCreate sends CreateNetwork and returns its protocol error ("" on
// success) and how long it took from the send. It does not fail the test,
// so it may run on any goroutine; a transport failure or an answer that
// is not the protocol's comes back as a message starting with "!".
func timedCreate(d *itest.Daemon, n itest.Net) (string, time.Duration) {
	start := time.Now()
	code, body, err := d.Post("/NetworkDriver.CreateNetwork", n.Request())
	took := time.Since(start)
	if err != nil {
		return "!" + err.Error(), took
	}
	var e struct{ Err string }
	if jerr := json.Unmarshal(body, &e); jerr != nil || (code == http.StatusOK) != (e.Err == "") {
		return fmt.Sprintf("!answered %d with %q", code, body), took
	}
	return e.Err, took
}

// libnetwork calls the driver's CreateNetwork before it stores the network,
// so for a moment Docker answers 404 for a network about to exist. Many
// conflicting creates on one parent, with a Docker that learns each network
// only after the driver answered {}: exactly one wins, every other is
// refused naming it, and the winner is never removed as stale.
func TestStaleLibnetworkOrderOneWinner(t *testing.T) {
	// Serial: a load test: 64 concurrent creates whose Docker lookups must each answer within the 2 s lookup timeout.
	for _, n := range []int{8, 64} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			docker := itest.NewFakeDocker(t)
			ns, d := setup(t, itest.DaemonOptions{Args: []string{"--docker-host", docker.Host()}})
			ids := make([]string, n)
			for i := range ids {
				ids[i] = fmt.Sprintf("%012x%052d", 0xd0c000+i, i)
			}
			msgs := itest.Concurrently(n, func(i int) string {
				msg, _ := timedCreate(d, passthru(ids[i], fmt.Sprintf("198.18.%d.0/24", i)))
				if msg == "" {
					// libnetwork stores the network after the driver's
					// answer. Docker's store here lags until a loser has
					// asked about the winner (plus 50 ms), however slow the
					// machine: the worst case of that order, every run.
					go func() {
						deadline := time.Now().Add(30 * time.Second)
						for time.Now().Before(deadline) {
							if _, notFound := docker.Answers(ids[i]); notFound > 0 {
								break
							}
							time.Sleep(time.Millisecond)
						}
						docker.LearnAfter(ids[i], 50*time.Millisecond)
					}()
				}
				return msg
			})
			winner := -1
			for i, msg := range msgs {
				if msg != "" {
					continue
				}
				if winner >= 0 {
					t.Fatalf("two creates answered {}: %s and %s (the first was taken for stale)", ids[winner][:12], ids[i][:12])
				}
				winner = i
			}
			if winner < 0 {
				t.Fatalf("no create answered {}: %q", msgs)
			}
			for i, msg := range msgs {
				if i == winner {
					continue
				}
				wantRefusedNaming(t, fmt.Sprintf("create %s", ids[i][:12]), msg, ids[winner])
				if strings.Contains(msg, "could not be asked") {
					t.Fatalf("create %s answered %q: Docker answered every question", ids[i][:12], msg)
				}
			}
			// The race this test is about did happen: a loser asked while
			// Docker did not know the winner yet, and was still refused.
			found, notFound := docker.Answers(ids[winner])
			t.Logf("Docker answered 404 %d times and 200 %d times for the winner", notFound, found)
			if notFound == 0 {
				t.Fatal("no loser asked Docker while the winner was unknown to it: the test did not exercise libnetwork's order")
			}
			ns.WantLinks(base...)
			wantRecords(t, d, 0, ids[winner])
			// The winner works: its endpoint is a passthru macvlan on vp0.
			d.Endpoint(ids[winner], epA, fmt.Sprintf("198.18.%d.10/24", winner), "", "")
			l := ns.MustLink(linkA)
			if p := ns.ParentName(l); p != "vp0" || l.Type() != "macvlan" {
				t.Fatalf("winner's endpoint is a %s on %s, want a macvlan on vp0", l.Type(), p)
			}
		})
	}
}

// A young holder Docker does not know yet is asked about again once it is
// as old as the grace period; Docker has learned it meanwhile, so the
// create is refused and the holder stays.
func TestStaleYoungHolderAskedAgainAfterGrace(t *testing.T) {
	// Serial: the create must reach Docker within the 500 ms before Docker learns the holder.
	docker := itest.NewFakeDocker(t)
	ns, d := setup(t, itest.DaemonOptions{Args: []string{"--docker-host", docker.Host()}})
	sentA := time.Now()
	d.MustCreateNetwork(passthru(netA, "198.18.1.0/24"))
	docker.LearnAfter(netA, 500*time.Millisecond)
	d.Endpoint(netA, epA, "198.18.1.10/24", "", "")
	msg := d.CreateNetwork(bridge(netB, "198.18.2.0/24"))
	wantRefusedNaming(t, "create against a holder Docker learns late", msg, netA)
	if age := time.Since(sentA); age < grace {
		t.Fatalf("refused %s after the holder's create was sent: want the holder asked again once %s old", age, grace)
	}
	if found, notFound := docker.Answers(netA); found != 1 || notFound != 1 {
		t.Fatalf("Docker answered 200 %d and 404 %d times for the holder, want 404 then 200", found, notFound)
	}
	ns.WantLinks(with(linkA)...)
	wantRecords(t, d, 1, netA)
}

// A 404 means "no such network" only when it is Docker's: Api-Version set
// and Docker's JSON error body. Any other 404 means Docker could not be
// asked: the create is refused at once and the holder stays. Docker's own
// 404 for a holder older than the grace period removes it at once.
func TestStaleOnlyDockers404RemovesHolder(t *testing.T) {
	// Serial: its assertions are timing bounds (refusals within 2 s).
	docker := itest.NewFakeDocker(t)
	ns, d := setup(t, itest.DaemonOptions{Args: []string{"--docker-host", docker.Host()}})
	d.MustCreateNetwork(passthru(netA, "198.18.1.0/24"))
	answered := time.Now()
	d.Endpoint(netA, epA, "198.18.1.10/24", "", "")
	sleepUntilOld(answered)

	for _, tc := range []struct {
		name string
		mode itest.DockerMode
	}{
		{"web server 404", itest.WebServer404},
		{"404 without Api-Version", itest.NoAPIVersion404},
		{"404 with a text body", itest.TextBody404},
	} {
		docker.SetMode(tc.mode)
		calls := docker.Calls()
		msg, took := timedCreate(d, bridge(netB, "198.18.2.0/24"))
		wantRefusedNaming(t, "create with a "+tc.name, msg, netA)
		if !strings.Contains(msg, "could not be asked") {
			t.Fatalf("create with a %s answered %q, want it to say Docker could not be asked", tc.name, msg)
		}
		if docker.Calls() == calls {
			t.Fatalf("create with a %s: Docker was not asked", tc.name)
		}
		if took > 2*time.Second {
			t.Fatalf("create with a %s was refused after %s, want at once", tc.name, took)
		}
		ns.WantLinks(with(linkA)...)
	}
	wantRecords(t, d, 1, netA)

	// Docker's own 404: the old holder is stale and goes, without a wait.
	docker.SetMode(itest.DockerAPI)
	msg, took := timedCreate(d, bridge(netB, "198.18.2.0/24"))
	if msg != "" {
		t.Fatalf("create over a stale holder answered %q, want {}", msg)
	}
	if took > 2*time.Second {
		t.Fatalf("create over an old stale holder took %s, want no grace wait", took)
	}
	if found, notFound := docker.Answers(netA); found != 0 || notFound != 1 {
		t.Fatalf("Docker answered 200 %d and 404 %d times for the old holder, want one 404", found, notFound)
	}
	ns.WantLinks(base...)
	wantRecords(t, d, 0, netB)
}

// Of several holders, one that Docker still knows is enough to refuse, and
// then none of them is removed, not even those Docker does not know.
func TestStaleOneLiveHolderKeepsAll(t *testing.T) {
	t.Parallel()
	docker := itest.NewFakeDocker(t)
	ns, d := setup(t, itest.DaemonOptions{Args: []string{"--docker-host", docker.Host()}})
	for i, h := range []struct{ net, ep string }{{netA, epA}, {netB, epB}, {netC, epC}} {
		d.MustCreateNetwork(bridge(h.net, fmt.Sprintf("198.18.%d.0/24", i+1)))
		d.Endpoint(h.net, h.ep, fmt.Sprintf("198.18.%d.10/24", i+1), "", "")
	}
	answered := time.Now()
	sleepUntilOld(answered)
	docker.SetLive(netB)
	const netP = "dddddddddddd0000000000000000000000000000000000000000000000000004"
	msg := d.CreateNetwork(passthru(netP, "198.18.9.0/24"))
	wantRefusedNaming(t, "passthru over three holders, one live", msg, netA, netB, netC)
	ns.WantLinks(with(linkA, linkB, linkC)...)
	wantRecords(t, d, 3, netA, netB, netC)
}

// With Docker hung, the check is bounded as a whole: every holder is asked
// at once and the create is refused once the per-lookup timeout (2 s)
// passes, and a compatible create waiting on the parent meanwhile is
// answered right after.
func TestStaleCheckBoundedWhenDockerHangs(t *testing.T) {
	// Serial: its assertions are timing bounds (5 s and 6 s).
	docker := itest.NewFakeDocker(t)
	ns, d := setup(t, itest.DaemonOptions{Args: []string{"--docker-host", docker.Host()}})
	var holders []string
	for i := 0; i < 10; i++ {
		id := fmt.Sprintf("%012x%052d", 0x401de0+i, i)
		holders = append(holders, id)
		d.MustCreateNetwork(bridge(id, fmt.Sprintf("198.18.%d.0/24", i+1)))
	}
	docker.SetMode(itest.Hung)
	const (
		netP = "dddddddddddd0000000000000000000000000000000000000000000000000004"
		netQ = "eeeeeeeeeeee0000000000000000000000000000000000000000000000000005"
	)
	type result struct {
		msg  string
		took time.Duration
	}
	conflicting, compatible := make(chan result, 1), make(chan result, 1)
	go func() {
		msg, took := timedCreate(d, passthru(netP, "198.18.99.0/24"))
		conflicting <- result{msg, took}
	}()
	// Once Docker is being asked, the conflicting create holds the parent.
	for deadline := time.Now().Add(5 * time.Second); docker.Calls() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the conflicting create did not ask Docker within 5 s")
		}
	}
	go func() {
		msg, took := timedCreate(d, bridge(netQ, "198.18.11.0/24"))
		compatible <- result{msg, took}
	}()
	c := <-conflicting
	t.Logf("conflicting create refused after %s", c.took)
	if c.took >= 5*time.Second {
		t.Fatalf("conflicting create with Docker hung was answered after %s, want < 5 s", c.took)
	}
	if !strings.Contains(c.msg, "already used by 10 networks") || !strings.Contains(c.msg, "could not be asked") {
		t.Fatalf("conflicting create with Docker hung answered %q, want a refusal over 10 holders saying Docker could not be asked", c.msg)
	}
	named := 0
	for _, h := range holders {
		if strings.Contains(c.msg, "docker network rm "+h[:12]) {
			named++
		}
	}
	if named < 5 {
		t.Fatalf("refusal %q names %d holders with their fix, want 5 (and the count of the others)", c.msg, named)
	}
	if n := docker.Calls(); n != len(holders) {
		t.Fatalf("Docker was asked %d times, want %d: every holder at once", n, len(holders))
	}
	q := <-compatible
	t.Logf("compatible create answered after %s", q.took)
	if q.msg != "" || q.took >= 6*time.Second {
		t.Fatalf("compatible create behind the hung check answered %q after %s, want {} in < 6 s", q.msg, q.took)
	}
	ns.WantLinks(base...)
	wantRecords(t, d, 0, append(holders, netQ)...)
}
