package rules

import (
	"strconv"
	"time"

	"github.com/underlay-net/underlay/internal/probeopt"
	"github.com/underlay-net/underlay/netlinkutil/vocab"
	"github.com/underlay-net/underlay/store/record"
)

// OptAddressProbe is how long the probe of an endpoint's addresses may
// take ("0" switches it off).
const OptAddressProbe = probeopt.Name

const (
	// DefaultProbe is the probe's budget where it is on by default
	// (probeopt.Default).
	DefaultProbe = probeopt.Default
	// maxDeclines bounds the offers a CreateEndpoint declines.
	MaxDeclines = 3
)

// ParseAddressProbe validates address_probe: a duration from 0 to 5 s;
// given reports whether it was.
func ParseAddressProbe(opts map[string]string) (budget time.Duration, given bool, err error) {
	v, ok := opts[OptAddressProbe]
	if !ok {
		return 0, false, nil
	}
	d, ok := probeopt.Parse(v)
	if !ok {
		return 0, true, Invalidf("address_probe %q is not a duration from 0 (off) to %s: use for example -o address_probe=300ms", v, probeopt.Max)
	}
	return d, true, nil
}

// Docker's own option names and ranges for announcements.
const (
	OptAdvertiseNMsgs = "com.docker.network.advertise_addr_nmsgs"
	OptAdvertiseMs    = "com.docker.network.advertise_addr_ms"
	LabelEnableIPv4   = "com.docker.network.enable_ipv4"
)

// announceConfig is how many announcements, how far apart.
type announceConfig struct {
	Count    int
	Interval time.Duration
}

// parseAnnounce validates Docker's announcement options: 0 to 3 messages
// (0: none; default 3), 100 to 2000 ms apart (default 1000).
func parseAnnounce(opts map[string]string) (announceConfig, error) {
	c := announceConfig{Count: 3, Interval: time.Second}
	if v, ok := opts[OptAdvertiseNMsgs]; ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 3 {
			return c, Invalidf("%s %q is not a number from 0 (no announcements) to 3: use for example -o %s=3", OptAdvertiseNMsgs, v, OptAdvertiseNMsgs)
		}
		c.Count = n
	}
	if v, ok := opts[OptAdvertiseMs]; ok {
		ms, err := strconv.Atoi(v)
		if err != nil || ms < 100 || ms > 2000 {
			return c, Invalidf("%s %q is not a number of milliseconds from 100 to 2000: use for example -o %s=1000", OptAdvertiseMs, v, OptAdvertiseMs)
		}
		c.Interval = time.Duration(ms) * time.Millisecond
	}
	return c, nil
}

// AnnounceOf says whether and how a joined endpoint is announced by
// underlay: not where the engine does, not on internal networks nor
// ipvlan l3/l3s, not when the network asks for none.
func AnnounceOf(n record.Network) (announceConfig, bool) {
	c, _ := parseAnnounce(n.Options) // validated at CreateNetwork
	if n.EngineAnnounces || n.Internal || c.Count == 0 || (n.Type == TypeIpvlan && n.Mode != vocab.IpvlanL2) {
		return c, false
	}
	return c, true
}
