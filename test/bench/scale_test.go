//go:build bench

package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/go-plugins-helpers/network"
	"github.com/underlay-net/underlay/internal/itest"
	"github.com/underlay-net/underlay/store"
	"github.com/underlay-net/underlay/store/record"
)

// daemonConfig is the typed configuration the daemon keeps with a network
// created with only a parent (default options): a daemon creates one, and
// its record is read from the state file once the daemon has stopped.
func daemonConfig(t *testing.T) record.NetworkConfig {
	ns := itest.NewNetns(t)
	ns.AddVeth("vp0", "vp0-peer", 1500)
	d := itest.StartDaemon(t, ns, itest.DaemonOptions{Args: []string{"--log-level", "warn"}})
	netID := id("s", 0, 0)
	d.MustCreateNetwork(itest.Net{ID: netID, Opts: map[string]string{"parent": "vp0"}, V4: []string{"198.18.200.0/24"}})
	if err := d.Stop(); err != nil {
		t.Fatal(err)
	}
	db, err := store.Open(d.State, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	n, err := store.ReadNetwork(db, netID)
	if err != nil || n == nil || n.Config == (record.NetworkConfig{}) {
		t.Fatalf("the daemon's record of network %s: %+v, %v", netID, n, err)
	}
	return n.Config
}

// fillState writes nets networks with epsPer endpoints each, their records
// as a daemon writes them (cfg: daemonConfig), so that it has nothing to
// rewrite at its start. perParent networks share one parent name; the
// first perParent-1 are on vp0 (the parent the latency probe uses), the
// rest on parents that need not exist.
func fillState(t *testing.T, path string, nets, epsPer, perParent int, cfg record.NetworkConfig) {
	db, err := store.Open(path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	const chunk = 500
	for start := 0; start < nets; start += chunk {
		err := db.Update(func(tx *store.Tx) error {
			for i := start; i < start+chunk && i < nets; i++ {
				parent := fmt.Sprintf("p%04d", i/perParent)
				if i < perParent-1 {
					parent = "vp0"
				}
				a := i * 16 // a /28 per network in 10.0.0.0/8 (records only, never on a wire)
				n := record.Network{ID: id("s", 0, i), Type: "macvlan", Parent: parent, Mode: "bridge",
					IPv4: []record.Pool{{Subnet: fmt.Sprintf("10.%d.%d.%d/28", a>>16&255, a>>8&255, a&255)}}, Config: cfg}
				if err := tx.PutNetwork(n); err != nil {
					return err
				}
				for e := 0; e < epsPer; e++ {
					epID := id("t", e, i)
					if err := tx.PutEndpoint(record.Endpoint{NetworkID: n.ID, ID: epID, Link: "ule" + epID[:12], MAC: "02:42:00:00:00:01"}); err != nil {
						return err
					}
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

func rssKB(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.Atoi(f[1])
			return kb
		}
	}
	return -1
}

func benchScale(t *testing.T, tb *table) {
	type setup struct {
		ns  *itest.Netns
		d   *itest.Daemon
		dir string
	}
	cfg := daemonConfig(t)
	mk := func(nets, epsPer int) setup {
		dir := t.TempDir()
		fillState(t, filepath.Join(dir, "underlay.db"), nets, epsPer, 10, cfg)
		ns := itest.NewNetns(t)
		ns.AddVeth("vp0", "vp0-peer", 1500)
		return setup{ns: ns, dir: dir}
	}
	big, small := mk(10000, 10), mk(10, 0)

	// Start-up: process start to socket served, restore and reconcile
	// included, several times; resident memory once serving.
	var startups []time.Duration
	var rss int
	for i := 0; i < 5; i++ {
		if big.d == nil {
			big.d = itest.StartDaemon(t, big.ns, itest.DaemonOptions{Dir: big.dir, Args: []string{"--log-level", "warn"}})
			big.d.Kill()
		}
		t0 := time.Now()
		if err := big.d.StartNoWait(); err != nil {
			t.Fatal(err)
		}
		if err := big.d.WaitReadyPoll(10*time.Second, time.Millisecond); err != nil {
			t.Fatal(err)
		}
		startups = append(startups, time.Since(t0))
		rss = rssKB(big.d.Pid())
		if i < 4 {
			big.d.Kill()
		}
	}
	st := result{lat: startups}
	tb.row("scale", "start to socket served, 10k nets/100k eps (p50)", ms(st.pct(0.5)), "", "", "< 1000 ms", verdict(st.pct(0.5) < time.Second))
	tb.row("scale", "resident memory serving, 10k nets/100k eps", fmt.Sprintf("%.1f MB", float64(rss)/1024), "", "", "< 100 MB", verdict(rss > 0 && rss < 100*1024))

	// CreateNetwork latency on vp0 (9 networks already on it in both
	// states), 10,000 existing networks against 10, interleaved.
	small.d = itest.StartDaemon(t, small.ns, itest.DaemonOptions{Dir: small.dir, Args: []string{"--log-level", "warn"}})
	create := func(d *itest.Daemon, i int) (time.Duration, error) {
		netID := id("z", 0, i)
		req := itest.Net{ID: netID, Opts: map[string]string{"parent": "vp0"}, V4: []string{"198.18.200.0/24"}}.Request()
		t0 := time.Now()
		code, body, err := d.Post("/NetworkDriver.CreateNetwork", req)
		el := time.Since(t0)
		if err == nil && code != 200 {
			err = fmt.Errorf("%s", body)
		}
		if err == nil {
			_, _, err = d.Post("/NetworkDriver.DeleteNetwork", network.DeleteNetworkRequest{NetworkID: netID})
		}
		return el, err
	}
	var lb, ls result
	for i := 0; i < 300; i++ {
		for _, p := range []struct {
			d *itest.Daemon
			r *result
		}{{big.d, &lb}, {small.d, &ls}} {
			el, err := create(p.d, i)
			if err != nil {
				t.Fatal(err)
			}
			p.r.lat = append(p.r.lat, el)
		}
	}
	ratio := float64(lb.pct(0.5)) / float64(ls.pct(0.5))
	tb.row("scale", "CreateNetwork p50, 10k existing vs 10", ms(lb.pct(0.5)), ms(ls.pct(0.5)), fmt.Sprintf("%.2f", ratio), "<= 1.20", verdict(ratio <= 1.2))
	fi, _ := os.Stat(big.d.State)
	size := float64(fi.Size()) / 1e6
	tb.row("scale", "state file size, 10k nets/100k eps", fmt.Sprintf("%.2f MB", size), "", "", "<= 20 MB", verdict(size <= 20))
}
