package probeopt

import (
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	for v, want := range map[string]time.Duration{"0": 0, "0s": 0, "300ms": 300 * time.Millisecond, "5s": Max, "5.001s": -1, "1m": -1, "-1s": -1, "x": -1, "": -1} {
		d, ok := Parse(v)
		if want < 0 {
			if ok {
				t.Errorf("%q: %s accepted, want refused", v, d)
			}
			continue
		}
		if !ok || d != want {
			t.Errorf("%q: %s %v, want %s", v, d, ok, want)
		}
	}
}
