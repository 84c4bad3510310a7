package docs

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/underlay-net/underlay/metrics"
	"github.com/underlay-net/underlay/store"
)

// Every relative link of the README and of docs/ names a file of the
// repository, and every anchor a heading of the page it points to (as
// GitHub makes anchors from headings).
func TestLinksAndAnchorsResolve(t *testing.T) {
	pages, err := Pages(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, page := range pages {
		doc := read(t, page)
		for _, l := range Links(doc) {
			target, anchor, _ := strings.Cut(l.Target, "#")
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path := page
			if target != "" {
				path = filepath.Join(filepath.Dir(page), filepath.FromSlash(target))
				if !Exists(path) {
					t.Errorf("%s:%d: link %q: no file %s", rel(page), l.Line, l.Target, rel(path))
					continue
				}
			}
			if anchor == "" {
				continue
			}
			if !strings.HasSuffix(path, ".md") {
				t.Errorf("%s:%d: link %q: an anchor into a file that is not Markdown", rel(page), l.Line, l.Target)
				continue
			}
			if !slices.Contains(Anchors(read(t, path)), anchor) {
				t.Errorf("%s:%d: link %q: %s has no heading with the anchor #%s", rel(page), l.Line, l.Target, rel(path), anchor)
			}
		}
	}
}

// The link checker itself: anchors as GitHub makes them, links outside
// code, a missing file and a missing anchor found.
func TestLinkParsing(t *testing.T) {
	doc := "# Title\n\n## What `docker network create` does\n\n## IPAM: subnets\n\n## Title\n\n" +
		"```\n## not a heading [x](nowhere.md)\n```\n" +
		"see [a](#title-1) and `[b](not-a-link.md)` and [c](other.md#ipam-subnets).\n"
	got := Anchors(doc)
	want := []string{"title", "what-docker-network-create-does", "ipam-subnets", "title-1"}
	if !slices.Equal(got, want) {
		t.Errorf("anchors %q, want %q", got, want)
	}
	links := Links(doc)
	if len(links) != 2 || links[0].Target != "#title-1" || links[1].Target != "other.md#ipam-subnets" || links[0].Line != 12 {
		t.Errorf("links %+v, want #title-1 and other.md#ipam-subnets on line 12", links)
	}
}

// The metrics reference of docs/operating.md lists exactly the metrics
// the daemon registers (the integration suite's TestMetrics checks it
// against a running daemon's /metrics too).
func TestMetricsReferenceIsTheRegistry(t *testing.T) {
	db, err := store.Open(filepath.Join(t.TempDir(), "state.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	m := metrics.New(metrics.Options{Version: "test"})
	if err := m.WatchState(db); err != nil {
		t.Fatal(err)
	}
	if err := m.WatchLAN(noLANChecks{}); err != nil {
		t.Fatal(err)
	}
	// The request metrics have series once a request was answered.
	m.ObserveRequest("NetworkDriver.CreateNetwork", "ok", time.Millisecond)
	families, err := m.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var registered []string
	for _, f := range families {
		if strings.HasPrefix(f.GetName(), "underlay_") {
			registered = append(registered, f.GetName())
		}
	}
	documented, err := MetricsReference()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range registered {
		if !slices.Contains(documented, name) {
			t.Errorf("metric %s is registered but not in the metrics reference of docs/operating.md", name)
		}
	}
	for _, name := range documented {
		if !slices.Contains(registered, name) {
			t.Errorf("docs/operating.md documents metric %s, which the daemon does not register", name)
		}
	}
}

type noLANChecks struct{}

func (noLANChecks) LANCheckCounts() map[[2]string]int { return map[[2]string]int{{"parent", "ok"}: 0} }

// Every refusal the code can answer is quoted by an entry of
// docs/troubleshooting.md (a "You see:" line), and every quote is of a
// refusal the code still has.
func TestTroubleshootingQuotesEveryRefusal(t *testing.T) {
	refusals, err := Refusals(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(refusals) < 100 {
		t.Fatalf("found %d refusals in the code; the walk has lost its way (a renamed constructor?)", len(refusals))
	}
	keys, err := TroubleshootingKeys(root)
	if err != nil {
		t.Fatal(err)
	}
	// A quote names its refusals: three words at least, and no more than
	// maxQuoted refusals each (a phrase any refusal could say documents
	// none of them).
	const maxQuoted = 6
	for _, k := range keys {
		if n := Literal(k); n < 3 {
			t.Errorf("docs/troubleshooting.md quotes `%s`: %d words, too few to name a refusal; quote three or more", k, n)
		}
	}
	used := map[string]int{}
	for _, r := range refusals {
		if Literal(r.Format) < 3 {
			continue
		}
		quoted := false
		for _, k := range keys {
			if Quotes(k, r.Format) {
				quoted = true
				used[k]++
			}
		}
		if !quoted {
			t.Errorf("%s: refusal %q has no entry in docs/troubleshooting.md: add a \"You see:\" line quoting its words (\"…\" for what it fills in) to the entry that explains it, or a new entry", r.Where, Words(r.Format))
		}
	}
	for _, k := range keys {
		switch n := used[k]; {
		case n == 0:
			t.Errorf("docs/troubleshooting.md quotes `%s`, which no refusal of the code says: update or remove it", k)
		case n > maxQuoted:
			t.Errorf("docs/troubleshooting.md quotes `%s`, which %d refusals say: quote each more closely (at most %d a quote)", k, n, maxQuoted)
		}
	}
}

func TestQuotes(t *testing.T) {
	for _, c := range []struct {
		key, format string
		want        bool
	}{
		{"is already used by network", "%w: parent %s is already used by network %s (%s): %s.", true},
		{"parent … is not an Ethernet link", "parent %s is not an Ethernet link (the kernel calls its type %s)", true},
		{"is not an Ethernet link … parent", "parent %s is not an Ethernet link", false},
		{"no such thing", "parent %s is not an Ethernet link", false},
	} {
		if got := Quotes(c.key, c.format); got != c.want {
			t.Errorf("Quotes(%q, %q) = %v, want %v", c.key, c.format, got, c.want)
		}
	}
	if n := Literal("pool %s %s"); n != 1 {
		t.Errorf("Literal(pool %%s %%s) = %d, want 1", n)
	}
}

// root is the repository, from this package's directory.
const root = ".."

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func rel(path string) string {
	if r, err := filepath.Rel(root, path); err == nil {
		return r
	}
	return path
}

// Every log message the troubleshooting page explains is one the code
// still logs.
func TestTroubleshootingLogMessagesAreTheCodes(t *testing.T) {
	msgs, err := LogMessages(root)
	if err != nil {
		t.Fatal(err)
	}
	lits, err := Literals(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		if !slices.ContainsFunc(lits, func(l string) bool { return strings.Contains(l, m) }) {
			t.Errorf("docs/troubleshooting.md explains the log message %q, which the code does not log: update it", m)
		}
	}
}

// The README is the front door: 250 lines at most (issue 39); the rest
// is in docs/, which it maps.
func TestREADMEIsAFrontDoor(t *testing.T) {
	readme := read(t, filepath.Join(root, "README.md"))
	if n := strings.Count(readme, "\n"); n > 250 {
		t.Errorf("README.md has %d lines, more than 250: move the detail to a page of docs/ and link it", n)
	}
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pages {
		if !strings.Contains(readme, "](docs/"+filepath.Base(p)+")") {
			t.Errorf("README.md's map of docs/ does not link %s", rel(p))
		}
	}
}
