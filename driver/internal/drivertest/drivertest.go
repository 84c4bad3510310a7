// Package drivertest holds what the tests of the driver and of its rules
// share: the Docker IDs they use, the CreateNetwork request builder and the
// error check. Only tests import it.
package drivertest

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/docker/go-plugins-helpers/network"
	"github.com/underlay-net/underlay/store/record"
)

// Docker IDs of the tests' networks and endpoints.
const (
	NetA = "aaaaaaaaaaaa0000000000000000000000000000000000000000000000000001"
	NetB = "bbbbbbbbbbbb0000000000000000000000000000000000000000000000000002"
	NetC = "cccccccccccc0000000000000000000000000000000000000000000000000003"
	EpA  = "eaeaeaeaeaea0000000000000000000000000000000000000000000000000001"
	EpB  = "ebebebebebeb0000000000000000000000000000000000000000000000000002"
	EpC  = "ecececececec0000000000000000000000000000000000000000000000000003"
	EpD  = "edededededed0000000000000000000000000000000000000000000000000004"
)

// NetReq is a CreateNetwork request in short.
type NetReq struct {
	ID       string
	Opts     map[string]string
	V4, V6   []string // "subnet[,gateway]"
	Internal bool
	Aux      []string // aux addresses of the first IPv4 pool
	// Space is the pools' address space ("LocalDefault", Docker's IPAM,
	// when empty).
	Space string
}

// The labels Docker puts the options under (libnetwork's netlabel).
const (
	labelGeneric    = "com.docker.network.generic"
	labelInternal   = "com.docker.network.internal"
	labelEnableIPv6 = "com.docker.network.enable_ipv6"
)

// CreateReq is the request Docker sends for r.
func CreateReq(r NetReq) *network.CreateNetworkRequest {
	generic := map[string]any{}
	for k, v := range r.Opts {
		generic[k] = v
	}
	req := &network.CreateNetworkRequest{NetworkID: r.ID, Options: map[string]any{labelGeneric: generic}}
	if r.Internal {
		req.Options[labelInternal] = true
	}
	space := r.Space
	if space == "" {
		space = "LocalDefault"
	}
	pools := func(specs []string) []*network.IPAMData {
		var out []*network.IPAMData
		for _, s := range specs {
			sub, gw, _ := strings.Cut(s, ",")
			out = append(out, &network.IPAMData{AddressSpace: space, Pool: sub, Gateway: gw})
		}
		return out
	}
	req.IPv4Data = pools(r.V4)
	if len(r.Aux) > 0 && len(req.IPv4Data) > 0 {
		req.IPv4Data[0].AuxAddresses = map[string]any{}
		for i, a := range r.Aux {
			req.IPv4Data[0].AuxAddresses[fmt.Sprintf("aux%d", i)] = a + "/24"
		}
	}
	if len(r.V6) > 0 {
		req.Options[labelEnableIPv6] = true
		req.IPv6Data = pools(r.V6)
	}
	return req
}

// WantErr fails t unless err wraps kind (when kind is not nil) and
// mentions every substring.
func WantErr(t *testing.T, err, kind error, substrings ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %v", kind)
	}
	if kind != nil && !errors.Is(err, kind) {
		t.Fatalf("error %q is not %v", err, kind)
	}
	for _, s := range substrings {
		if !strings.Contains(err.Error(), s) {
			t.Fatalf("error %q does not mention %q", err, s)
		}
	}
}

// Macvlan is the record of a macvlan network; subnets with a colon are IPv6.
func Macvlan(id, parent, mode string, subnets ...string) record.Network {
	return Record(id, "macvlan", parent, mode, "", subnets...)
}

// Ipvlan is the record of an ipvlan network.
func Ipvlan(id, parent, mode, flag string, subnets ...string) record.Network {
	return Record(id, "ipvlan", parent, mode, flag, subnets...)
}

// Config is the typed configuration of a network given none of its
// options, as CreateNetwork parses it (config.DefaultConfig; a test of
// package config keeps the two the same).
func Config() record.NetworkConfig {
	return record.NetworkConfig{
		DHCP:      record.DHCPConfig{Timeout: 10 * time.Second},
		IPv6Mode:  "static",
		MACPolicy: "stable",
		Announce:  record.Announce{Count: 3, Interval: time.Second},
	}
}

// Record is the record of a network of any type, with the default
// configuration.
func Record(id, typ, parent, mode, flag string, subnets ...string) record.Network {
	n := record.Network{ID: id, Type: typ, Parent: parent, Mode: mode, Flag: flag, Config: Config()}
	for _, s := range subnets {
		if strings.Contains(s, ":") {
			n.IPv6 = append(n.IPv6, record.Pool{Subnet: s})
		} else {
			n.IPv4 = append(n.IPv4, record.Pool{Subnet: s})
		}
	}
	return n
}
