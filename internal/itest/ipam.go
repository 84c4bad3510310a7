package itest

// The IPAM side of the kit: /IpamDriver.* requests, the addresses and
// routes a test plants in its namespace for the allocator to avoid, and the
// IPAM records of a stopped daemon's state file.

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"sort"

	"github.com/docker/go-plugins-helpers/ipam"
	"github.com/underlay-net/underlay/store"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// IPAMCall sends an /IpamDriver.<route> request. It returns the HTTP
// status and the protocol error ("" on success), and decodes a successful
// answer into out.
func (d *Daemon) IPAMCall(route string, req, out any) (int, string) {
	d.t.Helper()
	code, msg, err := d.TryIPAM(route, req, out)
	if err != nil {
		d.t.Fatal(err)
	}
	return code, msg
}

// TryIPAM is IPAMCall for goroutines other than the test's: it never fails
// the test but returns an error when the answer is not the protocol's.
func (d *Daemon) TryIPAM(route string, req, out any) (int, string, error) {
	code, body, err := d.Post("/IpamDriver."+route, req)
	if err != nil {
		return 0, "", fmt.Errorf("IpamDriver.%s: %w", route, err)
	}
	if code != http.StatusOK {
		var e struct{ Err string }
		if jerr := json.Unmarshal(body, &e); jerr != nil || e.Err == "" {
			return code, "", fmt.Errorf("IpamDriver.%s answered %d with %q: want {\"Err\": ...}", route, code, body)
		}
		return code, e.Err, nil
	}
	if out != nil {
		if err := json.Unmarshal(body, out); err != nil {
			return code, "", fmt.Errorf("IpamDriver.%s answered %q: %w", route, body, err)
		}
	}
	return code, "", nil
}

// MustIPAMCall is IPAMCall that fails the test on a refusal.
func (d *Daemon) MustIPAMCall(route string, req, out any) {
	d.t.Helper()
	if code, msg := d.IPAMCall(route, req, out); msg != "" {
		d.t.Fatalf("IpamDriver.%s answered %d: %s", route, code, msg)
	}
}

// RequestPool sends a RequestPool; the space defaults to underlay's local
// space, as Docker sends the one GetDefaultAddressSpaces answered.
func (d *Daemon) RequestPool(req ipam.RequestPoolRequest) (ipam.RequestPoolResponse, int, string) {
	d.t.Helper()
	if req.AddressSpace == "" {
		req.AddressSpace = LocalSpace
	}
	var resp ipam.RequestPoolResponse
	code, msg := d.IPAMCall("RequestPool", req, &resp)
	return resp, code, msg
}

// MustRequestPool fails the test unless the pool is handed out.
func (d *Daemon) MustRequestPool(req ipam.RequestPoolRequest) ipam.RequestPoolResponse {
	d.t.Helper()
	resp, code, msg := d.RequestPool(req)
	if msg != "" {
		d.t.Fatalf("RequestPool %+v answered %d: %s", req, code, msg)
	}
	if resp.PoolID == "" || resp.Pool == "" {
		d.t.Fatalf("RequestPool %+v answered %+v: want a PoolID and a Pool", req, resp)
	}
	return resp
}

// AutoPool requests an automatic pool of the family (no Pool, no options).
func (d *Daemon) AutoPool(v6 bool) ipam.RequestPoolResponse {
	d.t.Helper()
	return d.MustRequestPool(ipam.RequestPoolRequest{V6: v6})
}

// RequestAddress asks for an address of a pool (addr "" for any; gateway
// for libnetwork's gateway request). It returns the address in CIDR form,
// the status and the protocol error.
func (d *Daemon) RequestAddress(poolID, addr string, gateway bool) (string, int, string) {
	d.t.Helper()
	req := ipam.RequestAddressRequest{PoolID: poolID, Address: addr, Options: map[string]string{}}
	if gateway {
		req.Options["RequestAddressType"] = "com.docker.network.gateway"
	}
	var resp ipam.RequestAddressResponse
	code, msg := d.IPAMCall("RequestAddress", req, &resp)
	return resp.Address, code, msg
}

// MustRequestAddress fails the test unless an address is handed out.
func (d *Daemon) MustRequestAddress(poolID, addr string, gateway bool) string {
	d.t.Helper()
	a, code, msg := d.RequestAddress(poolID, addr, gateway)
	if msg != "" {
		d.t.Fatalf("RequestAddress pool %s address %q gateway %v answered %d: %s", poolID, addr, gateway, code, msg)
	}
	return a
}

// IPAMState is what a stopped daemon's state file holds for its IPAM.
type IPAMState struct {
	Pools map[string]store.IPAMPool
	// Addresses are the allocated addresses of each pool, sorted.
	Addresses map[string][]string
}

// ReadIPAM reads the IPAM records of the state file; the daemon must not
// be running.
func (d *Daemon) ReadIPAM() IPAMState {
	d.t.Helper()
	db, err := store.Open(d.State, store.Options{})
	if err != nil {
		d.t.Fatalf("open state file: %v", err)
	}
	defer db.Close()
	s := IPAMState{Pools: map[string]store.IPAMPool{}, Addresses: map[string][]string{}}
	err = db.View(func(tx *store.Tx) error {
		pools, err := tx.IPAMPools()
		for _, p := range pools {
			s.Pools[p.ID] = p
			if as := tx.IPAMAddresses(p.ID); len(as) > 0 {
				sort.Strings(as)
				s.Addresses[p.ID] = as
			}
		}
		return err
	})
	if err != nil {
		d.t.Fatalf("read state file: %v", err)
	}
	return s
}

// StopAndReadIPAM stops the daemon (SIGTERM), reads its IPAM records and
// starts it again.
func (d *Daemon) StopAndReadIPAM() IPAMState {
	d.t.Helper()
	if err := d.Stop(); err != nil {
		d.t.Fatal(err)
	}
	s := d.ReadIPAM()
	d.Start()
	return s
}

// AddAddr adds an address in CIDR form to a link (IPv6 without duplicate
// address detection).
func (n *Netns) AddAddr(link, cidr string) {
	n.t.Helper()
	a, err := netlink.ParseAddr(cidr)
	if err != nil {
		n.t.Fatalf("address %q: %v", cidr, err)
	}
	if a.IP.To4() == nil {
		a.Flags = unix.IFA_F_NODAD
	}
	if err := n.NL.AddrAdd(n.MustLink(link), a); err != nil {
		n.t.Fatalf("add %s to %s: %v", cidr, link, err)
	}
}

// AddRoute adds a route to dst (a CIDR, or "default") through link, via
// gw when not "" (on-link otherwise), in table (0: main). An on-link
// "default" is IPv4's.
func (n *Netns) AddRoute(dst, gw, link string, table int) {
	n.t.Helper()
	r := &netlink.Route{LinkIndex: n.MustLink(link).Attrs().Index, Table: table}
	if dst == "default" && gw == "" {
		dst = "0.0.0.0/0"
	}
	if dst != "default" {
		_, p, err := net.ParseCIDR(dst)
		if err != nil {
			n.t.Fatalf("route destination %q: %v", dst, err)
		}
		r.Dst = p
	}
	if gw != "" {
		r.Gw = net.ParseIP(gw)
		if r.Gw == nil {
			n.t.Fatalf("route gateway %q is not an address", gw)
		}
	} else {
		r.Scope = netlink.SCOPE_LINK
	}
	if err := n.NL.RouteAdd(r); err != nil {
		n.t.Fatalf("add route %s via %q dev %s table %d: %v", dst, gw, link, table, err)
	}
}

// LocalSpace is ipam.LocalSpace: itest cannot import ipam (ipam imports
// dhcp, whose tests use itest). ipam's TestLocalSpace checks they agree.
const LocalSpace = "underlay-local"
