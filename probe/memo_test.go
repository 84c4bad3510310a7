package probe

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// An entry serves one probe on the same parent within the window.
func TestMemo(t *testing.T) {
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	m := NewMemo(2*time.Second, func() time.Time { return now })
	a := netip.MustParseAddr("198.18.0.5")
	for _, c := range []struct {
		name   string
		record bool
		parent string
		after  time.Duration
		budget time.Duration // the one asked; the clean probe's is 300 ms
		want   bool
	}{
		{"never probed", false, "eth0", 0, 300 * time.Millisecond, false},
		{"just probed", true, "eth0", 0, 300 * time.Millisecond, true},
		{"a shorter budget asked", true, "eth0", 0, 100 * time.Millisecond, true},
		{"a longer budget asked", true, "eth0", 0, 2 * time.Second, false},
		{"within the window", true, "eth0", 1999 * time.Millisecond, 300 * time.Millisecond, true},
		{"at the window's end", true, "eth0", 2 * time.Second, 300 * time.Millisecond, false},
		{"another parent", true, "eth1", 0, 300 * time.Millisecond, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			start := now
			defer func() { now = start }()
			if c.record {
				m.Probed(c.parent, a, 300*time.Millisecond)
			}
			now = now.Add(c.after)
			if got := m.Take("eth0", a, c.budget); got != c.want {
				t.Errorf("Take: %v, want %v", got, c.want)
			}
			if m.Take("eth0", a, 0) {
				t.Errorf("a second Take found the entry the first one took")
			}
			m.Take("eth1", a, 0)
		})
	}
}

// The memo's Wrap skips a probe the memo takes and probes otherwise (the
// parent here does not exist: a real probe fails on it).
func TestMemoizedProber(t *testing.T) {
	m := NewMemo(0, nil)
	p := m.Wrap(New())
	ctx := context.Background()
	m.Probed("no-such-link0", testAddr4, time.Second)
	m.Probed("no-such-link0", testAddr6, time.Second)
	if err := p.Probe(ctx, "no-such-link0", testMAC, testAddr4, time.Second); err != nil {
		t.Errorf("probe of an address the memo has: %v, want nil without a probe", err)
	}
	if err := p.ProbeIPv6(ctx, "no-such-link0", testMAC, testAddr6, time.Second); err != nil {
		t.Errorf("IPv6 probe of an address the memo has: %v, want nil without a probe", err)
	}
	if err := p.Probe(ctx, "no-such-link0", testMAC, testAddr4, time.Second); err == nil || !strings.Contains(err.Error(), "no-such-link0") {
		t.Errorf("second probe: %v, want the real probe's error naming the parent", err)
	}
}
