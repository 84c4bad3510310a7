//go:build bench

package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// chartPath is where `make bench` writes the chart docs/benchmarks.md shows
// (BENCH_CHART overrides it).
const chartPath = "../../docs/bench-endpoint-cycle.svg"

// chart writes an SVG bar chart of the endpoint cycle's throughput by
// concurrency, underlay against its floor, from the run just measured.
func chart(t *testing.T, ep map[int]*pair) {
	path := os.Getenv("BENCH_CHART")
	if path == "" {
		path = chartPath
	}
	const w, h, left, bottom, top = 520, 300, 60, 40, 40
	peak := 0.0
	for _, c := range levels {
		peak = max(peak, ep[c].u.opsPerSec(), ep[c].f.opsPerSec())
	}
	peak = niceCeil(peak)
	y := func(v float64) float64 { return top + (h-top-bottom)*(1-v/peak) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", w, h)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	fmt.Fprintf(&b, `<text x="%d" y="20" font-size="14">Endpoint cycles per second by concurrency (%s)</text>`+"\n", left, time.Now().UTC().Format("2006-01-02"))
	for i := 0; i <= 4; i++ { // grid and axis labels
		v := peak * float64(i) / 4
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", left, w-10, y(v), y(v))
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%.0f</text>`+"\n", left-6, y(v)+4, v)
	}
	group := float64(w-left-10) / float64(len(levels))
	for i, c := range levels {
		x0 := float64(left) + group*float64(i) + group*0.15
		bw := group * 0.33
		for k, s := range []struct {
			r     result
			color string
		}{{ep[c].u, "#2b6cb0"}, {ep[c].f, "#a0aec0"}} {
			v := s.r.opsPerSec()
			x := x0 + float64(k)*bw
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`+"\n", x, y(v), bw-2, y(0)-y(v), s.color)
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle" font-size="10">%.0f</text>`+"\n", x+bw/2-1, y(v)-3, v)
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">c=%d</text>`+"\n", x0+bw, h-bottom+16, c)
	}
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="10" height="10" fill="#2b6cb0"/><text x="%d" y="%d">underlay</text>`+"\n", w-170, top-12, w-156, top-3)
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="10" height="10" fill="#a0aec0"/><text x="%d" y="%d">floor</text>`+"\n", w-90, top-12, w-76, top-3)
	b.WriteString("</svg>\n")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	abs, _ := filepath.Abs(path)
	fmt.Println("bench: chart written to", abs)
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := 1.0
	for p*10 <= v {
		p *= 10
	}
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}
