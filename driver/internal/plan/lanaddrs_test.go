package plan

import (
	"net"
	"testing"
)

func TestSLAACAddress(t *testing.T) {
	for _, tc := range []struct{ mac, want string }{
		// RFC 4291 appendix A: the universal/local bit inverted, ff:fe in the middle.
		{"52:54:00:12:34:56", "fe80::5054:ff:fe12:3456/64"},
		{"46:e3:5e:c7:fa:e6", "fe80::44e3:5eff:fec7:fae6/64"},
		{"02:00:00:00:00:01", "fe80::ff:fe00:1/64"},
	} {
		mac, _ := net.ParseMAC(tc.mac)
		if got, ok := SLAACAddress(mac); !ok || got != tc.want {
			t.Errorf("SLAACAddress(%s) = %q, %v, want %q", tc.mac, got, ok, tc.want)
		}
	}
	if _, ok := SLAACAddress(nil); ok {
		t.Error("SLAACAddress of no MAC answered an address")
	}
}
