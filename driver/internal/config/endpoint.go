package config

import (
	"net/netip"
)

func EndpointAddr(s string, want6 bool) (string, error) {
	if s == "" {
		return "", nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil || p.Addr().Is6() != want6 {
		family := map[bool]string{false: "IPv4", true: "IPv6"}[want6]
		return "", Invalidf("endpoint address %q is not an %s address in CIDR form (such as %s)", s, family, map[bool]string{false: "198.18.1.10/24", true: "2001:db8::10/64"}[want6])
	}
	return p.String(), nil
}

// OptEndpointIfName is the endpoint driver option naming the container's
// interface (`docker run --network name=N,driver-opt=...=IF`, compose's
// interface_name).
const OptEndpointIfName = "com.docker.network.endpoint.ifname"

// EndpointIfName validates the interface name asked for: "" when none.
func EndpointIfName(opts map[string]any) (string, error) {
	v, ok := opts[OptEndpointIfName]
	if !ok {
		return "", nil
	}
	name, _ := v.(string)
	if err := checkIfName(name); err != nil {
		return "", err
	}
	return name, nil
}
