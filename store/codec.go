package store

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/underlay-net/underlay/store/record"
)

// The values of network and endpoint records (schema 4).
//
// Endpoints are nearly all of the records and the daemon decodes every one
// at start (schema 3's JSON took 0.5 s for 100,000), so they are not JSON:
// the value is a list of fields, each a tag byte and its payload, absent
// fields left out. The network and endpoint IDs are in the key, not here.
// Strings are a uvarint length and the bytes. Compact forms are used only
// when they give back the very string stored (the MAC in lowercase colon
// form, a CIDR in netip's canonical form, a boot ID in lowercase, a link
// named after the endpoint ID); anything else is kept as the string.
const (
	fieldLink      = 1  // string
	fieldLinkByID  = 2  // string prefix, byte n: the link is prefix+ID[:n]
	fieldMAC       = 3  // string
	fieldMAC6      = 4  // 6 bytes
	fieldIPv4      = 5  // string
	fieldIPv4Bin   = 6  // 4 address bytes, prefix length
	fieldIPv6      = 7  // string
	fieldIPv6Bin   = 8  // 16 address bytes, prefix length
	fieldSandbox   = 9  // string
	fieldBoot      = 10 // string
	fieldLeaseJSON = 11 // string: the Lease as JSON (rare, and it changes)
	fieldBootUUID  = 12 // 16 bytes: a boot ID, a UUID in lowercase
	fieldLease6    = 13 // string: the Lease6 as JSON (ipv6_mode=dhcpv6 only)
	fieldPlumb     = 14 // string: the Plumb as JSON (joined endpoints whose interface was read)
)

// minLinkIDChars is how many characters of the endpoint ID a link name must
// end with to be stored as its prefix (driver/internal/config names.go names links with a
// three-letter prefix and 12 characters of the ID).
const minLinkIDChars = 8

func encodeEndpoint(ep record.Endpoint) ([]byte, error) {
	out := make([]byte, 0, 32)
	str := func(tag byte, s string) {
		out = append(out, tag)
		out = binary.AppendUvarint(out, uint64(len(s)))
		out = append(out, s...)
	}
	if p, n := linkByID(ep.Link, ep.ID); n > 0 {
		str(fieldLinkByID, p)
		out = append(out, byte(n))
	} else {
		str(fieldLink, ep.Link)
	}
	if ep.MAC != "" {
		if hw, err := net.ParseMAC(ep.MAC); err == nil && len(hw) == 6 && hw.String() == ep.MAC {
			out = append(append(out, fieldMAC6), hw...)
		} else {
			str(fieldMAC, ep.MAC)
		}
	}
	cidr := func(s string, strTag, binTag byte, size int) {
		if p, err := netip.ParsePrefix(s); err == nil && p.Addr().BitLen() == 8*size && p.String() == s {
			out = append(append(out, binTag), p.Addr().AsSlice()...)
			out = append(out, byte(p.Bits()))
		} else if s != "" {
			str(strTag, s)
		}
	}
	cidr(ep.IPv4, fieldIPv4, fieldIPv4Bin, 4)
	cidr(ep.IPv6, fieldIPv6, fieldIPv6Bin, 16)
	if ep.Sandbox != "" {
		str(fieldSandbox, ep.Sandbox)
	}
	if u, ok := parseUUID(ep.Boot); ok {
		out = append(append(out, fieldBootUUID), u[:]...)
	} else if ep.Boot != "" {
		str(fieldBoot, ep.Boot)
	}
	if ep.Lease != nil {
		raw, err := json.Marshal(ep.Lease)
		if err != nil {
			return nil, fmt.Errorf("encode the lease of endpoint %s: %w", ep.ID, err)
		}
		str(fieldLeaseJSON, string(raw))
	}
	if ep.Lease6 != nil {
		raw, err := json.Marshal(ep.Lease6)
		if err != nil {
			return nil, fmt.Errorf("encode the DHCPv6 lease of endpoint %s: %w", ep.ID, err)
		}
		str(fieldLease6, string(raw))
	}
	if ep.Plumb != nil {
		raw, err := json.Marshal(ep.Plumb)
		if err != nil {
			return nil, fmt.Errorf("encode the container interface of endpoint %s: %w", ep.ID, err)
		}
		str(fieldPlumb, string(raw))
	}
	return out, nil
}

// linkByID splits a link name that ends with the start of the endpoint ID
// into the prefix before it and how many ID characters follow; n is 0 for
// any other name.
func linkByID(link, id string) (prefix string, n int) {
	for i := 0; len(link)-i >= minLinkIDChars; i++ {
		if strings.HasPrefix(id, link[i:]) && len(link)-i < 256 {
			return link[:i], len(link) - i
		}
	}
	return "", 0
}

// parseUUID reads a UUID in the form of /proc/sys/kernel/random/boot_id:
// lowercase hex, dashes after 8, 12, 16 and 20 digits.
func parseUUID(s string) (u [16]byte, ok bool) {
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return u, false
	}
	digits := s[:8] + s[9:13] + s[14:18] + s[19:23] + s[24:]
	if !isLowerHex(digits) {
		return u, false
	}
	_, _ = hex.Decode(u[:], []byte(digits))
	return u, true
}

func formatUUID(b []byte) string {
	h := hex.EncodeToString(b)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

var errTruncated = errors.New("truncated")

// fields reads the value encodeEndpoint wrote, one payload at a time.
type fields struct {
	v   []byte
	err error
}

func (f *fields) bytes(n int) []byte {
	if f.err != nil || n > len(f.v) {
		f.err = errTruncated
		return nil
	}
	b := f.v[:n]
	f.v = f.v[n:]
	return b
}

func (f *fields) str() string {
	n, size := binary.Uvarint(f.v)
	if f.err != nil || size <= 0 || n > uint64(len(f.v)-size) {
		f.err = errTruncated
		return ""
	}
	f.v = f.v[size:]
	return string(f.bytes(int(n)))
}

// prefix reads size address bytes and a prefix length as a CIDR string.
func (f *fields) prefix(size int) string {
	b := f.bytes(size + 1)
	if b == nil {
		return ""
	}
	a, _ := netip.AddrFromSlice(b[:size])
	return netip.PrefixFrom(a, int(b[size])).String()
}

// decodeEndpoint reads a value encodeEndpoint wrote; the IDs come from the
// key.
func decodeEndpoint(networkID, id string, v []byte) (record.Endpoint, error) {
	ep := record.Endpoint{NetworkID: networkID, ID: id}
	f := fields{v: v}
	for len(f.v) > 0 && f.err == nil {
		tag := f.v[0]
		f.v = f.v[1:]
		switch tag {
		case fieldLink:
			ep.Link = f.str()
		case fieldLinkByID:
			p := f.str()
			if n := f.bytes(1); n != nil {
				if int(n[0]) > len(id) {
					f.err = fmt.Errorf("the link takes %d characters of the ID", n[0])
					break
				}
				ep.Link = p + id[:n[0]]
			}
		case fieldMAC:
			ep.MAC = f.str()
		case fieldMAC6:
			if b := f.bytes(6); b != nil {
				ep.MAC = net.HardwareAddr(b).String()
			}
		case fieldIPv4:
			ep.IPv4 = f.str()
		case fieldIPv4Bin:
			ep.IPv4 = f.prefix(4)
		case fieldIPv6:
			ep.IPv6 = f.str()
		case fieldIPv6Bin:
			ep.IPv6 = f.prefix(16)
		case fieldSandbox:
			ep.Sandbox = f.str()
		case fieldBoot:
			ep.Boot = f.str()
		case fieldBootUUID:
			if b := f.bytes(16); b != nil {
				ep.Boot = formatUUID(b)
			}
		case fieldLeaseJSON:
			if s := f.str(); f.err == nil {
				ep.Lease = new(record.Lease)
				if err := json.Unmarshal([]byte(s), ep.Lease); err != nil {
					f.err = fmt.Errorf("lease: %w", err)
				}
			}
		case fieldLease6:
			if s := f.str(); f.err == nil {
				ep.Lease6 = new(record.Lease6)
				if err := json.Unmarshal([]byte(s), ep.Lease6); err != nil {
					f.err = fmt.Errorf("DHCPv6 lease: %w", err)
				}
			}
		case fieldPlumb:
			if s := f.str(); f.err == nil {
				ep.Plumb = new(record.Plumb)
				if err := json.Unmarshal([]byte(s), ep.Plumb); err != nil {
					f.err = fmt.Errorf("container interface: %w", err)
				}
			}
		default:
			f.err = fmt.Errorf("unknown field %d", tag)
		}
	}
	if f.err != nil {
		return ep, fmt.Errorf("%w: endpoint record %s of network %s: %w", ErrCorrupt, id, networkID, f.err)
	}
	return ep, nil
}

// networkValue is a network record's value: its sequence number, then
// the record as JSON without the ID (the key holds it). Networks stay
// JSON: they are few, their options vary, and a new field needs no
// schema step (the typed configuration, record.NetworkConfig, absent from
// records written before it was kept, is filled from their options by the
// driver's Restore, which can parse them: driver/internal/reconcile
// MigrateConfig).
func networkValue(seq []byte, n record.Network) ([]byte, error) {
	raw, err := json.Marshal(struct {
		*record.Network
		ID string `json:"id,omitempty"` // shadows Network.ID, left empty
	}{Network: &n})
	if err != nil {
		return nil, fmt.Errorf("encode network record %s: %w", n.ID, err)
	}
	return append(append(make([]byte, 0, len(seq)+len(raw)), seq...), raw...), nil
}

// splitNetworkValue splits a network record's value into its sequence
// number and its JSON.
func splitNetworkValue(id string, v []byte) (seq, raw []byte, err error) {
	seq, raw, err = splitSeq(v)
	if err != nil {
		return nil, nil, fmt.Errorf("network record %s: %w", id, err)
	}
	return seq, raw, nil
}

func decodeNetwork(id string, v []byte) (record.Network, []byte, error) {
	seq, raw, err := splitNetworkValue(id, v)
	if err != nil {
		return record.Network{}, nil, err
	}
	var n record.Network
	if err := json.Unmarshal(raw, &n); err != nil {
		return record.Network{}, nil, fmt.Errorf("%w: network record %s: %w", ErrCorrupt, id, err)
	}
	n.ID = id
	return n, seq, nil
}
