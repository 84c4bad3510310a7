package ipam

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/underlay-net/underlay/store"
)

func addrs(ss ...string) map[netip.Addr]bool {
	out := map[netip.Addr]bool{}
	for _, s := range ss {
		out[netip.MustParseAddr(s)] = true
	}
	return out
}

// Which address a request gets: the name's sticky one if it can have it,
// else the lowest never-used, else the least recently used remembered one.
func TestChooseAddress(t *testing.T) {
	pool := pfx("198.18.4.0/29") // .1 to .6 usable
	hour := func(h int) time.Time { return t0.Add(time.Duration(h) * time.Hour) }
	for _, c := range []struct {
		name       string
		rng        string
		taken      map[netip.Addr]bool
		sticky     string
		remembered map[string]time.Time
		want       string
		kind       addrKind
		fails      bool
	}{
		{name: "nothing known: the lowest", want: "198.18.4.1", kind: kindNeverUsed},
		{name: "the name's address", sticky: "198.18.4.5", remembered: map[string]time.Time{"198.18.4.5": hour(0)}, want: "198.18.4.5", kind: kindSticky},
		{name: "the name's address is taken: a never-used one", sticky: "198.18.4.5", taken: addrs("198.18.4.5"),
			remembered: map[string]time.Time{"198.18.4.5": hour(0)}, want: "198.18.4.1", kind: kindNeverUsed},
		{name: "the name's address outside the range", rng: "198.18.4.4/30", sticky: "198.18.4.2", want: "198.18.4.4", kind: kindNeverUsed},
		{name: "the name's address is the broadcast", sticky: "198.18.4.7", want: "198.18.4.1", kind: kindNeverUsed},
		{name: "remembered addresses are passed over", taken: addrs("198.18.4.1"),
			remembered: map[string]time.Time{"198.18.4.2": hour(0), "198.18.4.3": hour(1)}, want: "198.18.4.4", kind: kindNeverUsed},
		{name: "none never-used: the least recently used remembered", taken: addrs("198.18.4.1", "198.18.4.4", "198.18.4.6"),
			remembered: map[string]time.Time{"198.18.4.2": hour(5), "198.18.4.3": hour(2), "198.18.4.5": hour(3)}, want: "198.18.4.3", kind: kindRemembered},
		{name: "equal times: the lowest", taken: addrs("198.18.4.1", "198.18.4.2", "198.18.4.3", "198.18.4.4"),
			remembered: map[string]time.Time{"198.18.4.6": hour(1), "198.18.4.5": hour(1)}, want: "198.18.4.5", kind: kindRemembered},
		{name: "remembered but taken is not a fallback", taken: addrs("198.18.4.1", "198.18.4.2", "198.18.4.3", "198.18.4.4", "198.18.4.5", "198.18.4.6"),
			remembered: map[string]time.Time{"198.18.4.6": hour(1)}, fails: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := pickInput{Pool: pool,
				Taken: func(a netip.Addr) bool { return c.taken[a] },
				Remembered: func(a netip.Addr) (time.Time, bool) {
					at, ok := c.remembered[a.String()]
					return at, ok
				}}
			if c.rng != "" {
				in.Range = pfx(c.rng)
			}
			if c.sticky != "" {
				in.Sticky = netip.MustParseAddr(c.sticky)
			}
			a, kind, err := chooseAddress(in)
			if c.fails {
				if err == nil {
					t.Fatalf("chose %s (%s), want no address", a, kind)
				}
				return
			}
			if err != nil || a.String() != c.want || kind != c.kind {
				t.Fatalf("chose %s (%s, %v), want %s (%s)", a, kind, err, c.want, c.kind)
			}
		})
	}
}

// Which names are forgotten: those unused for the TTL and not held, then
// the least recently used not held ones past the bound.
func TestPruneNames(t *testing.T) {
	ttl := 30 * 24 * time.Hour
	now := t0.Add(100 * 24 * time.Hour)
	n := func(name, addr string, given, released time.Duration) store.IPAMName {
		r := store.IPAMName{Name: name, Address: addr, Given: now.Add(-given)}
		if released != 0 {
			r.Released = now.Add(-released)
		}
		return r
	}
	for _, c := range []struct {
		name  string
		names []store.IPAMName
		held  []string
		max   int
		want  []string
	}{
		{name: "all fresh", names: []store.IPAMName{n("a", "1", time.Hour, 0), n("b", "2", 29*24*time.Hour, 0)}, max: 10},
		{name: "released 31 days ago", names: []store.IPAMName{n("a", "1", 40*24*time.Hour, 31*24*time.Hour), n("b", "2", time.Hour, 0)}, max: 10, want: []string{"a"}},
		{name: "given long ago but released lately", names: []store.IPAMName{n("a", "1", 90*24*time.Hour, 24*time.Hour)}, max: 10},
		{name: "given long ago and held", names: []store.IPAMName{n("a", "1", 90*24*time.Hour, 0)}, held: []string{"1"}, max: 10},
		{name: "given long ago, not released, not held", names: []store.IPAMName{n("a", "1", 90*24*time.Hour, 0)}, max: 10, want: []string{"a"}},
		{name: "over the bound: the least recently used not held", max: 2, held: []string{"1"},
			names: []store.IPAMName{n("a", "1", 20*24*time.Hour, 0), n("b", "2", 10*24*time.Hour, 0), n("c", "3", time.Hour, 0), n("d", "4", 2*time.Hour, 0)},
			want:  []string{"b", "d"}},
		{name: "over the bound, all held: none", max: 1, held: []string{"1", "2"},
			names: []store.IPAMName{n("a", "1", time.Hour, 0), n("b", "2", time.Hour, 0)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := pruneNames(c.names, func(a string) bool { return slices.Contains(c.held, a) }, now, ttl, c.max)
			if !slices.Equal(got, c.want) {
				t.Fatalf("forgotten %v, want %v", got, c.want)
			}
		})
	}
}
