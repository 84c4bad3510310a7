package store

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/underlay-net/underlay/store/record"
)

func TestIDEncodingRoundTripsAndKeepsOrder(t *testing.T) {
	hexIDs := []string{strings.Repeat("0", 64), hexID('a'), hexID('b'), strings.Repeat("f", 64)}
	textIDs := []string{"", "\x00", "e1", "e10", "e2", "n1",
		strings.Repeat("A", 64),          // upper case: not Docker's form
		strings.Repeat("a", 63),          // too short
		strings.Repeat("a", 65),          // too long
		"s" + strings.Repeat("0", 63),    // test/bench's IDs
		string([]byte{0xff, 0x00, 0x01}), // not even UTF-8
	}
	for _, id := range append(slices.Clone(hexIDs), textIDs...) {
		k := encodeID(id)
		got, err := decodeID(k)
		if err != nil || got != id {
			t.Errorf("decodeID(encodeID(%q)) = %q, %v", id, got, err)
		}
		if isHex := slices.Contains(hexIDs, id); isHex != (len(k) == 33 && k[0] == idHex) {
			t.Errorf("encodeID(%q) = %x: hex form %v", id, k, isHex)
		}
	}
	for _, ids := range [][]string{hexIDs, textIDs} {
		sorted := slices.Clone(ids)
		slices.Sort(sorted)
		byKey := slices.Clone(ids)
		slices.SortFunc(byKey, func(a, b string) int { return bytes.Compare(encodeID(a), encodeID(b)) })
		if !slices.Equal(sorted, byKey) {
			t.Errorf("key order %q, ID order %q", byKey, sorted)
		}
	}
	for _, bad := range [][]byte{nil, {idHex}, {idHex, 1, 2}, {0x07, 'a'}} {
		if _, err := decodeID(bad); !errors.Is(err, ErrCorrupt) {
			t.Errorf("decodeID(%x) = %v, want ErrCorrupt", bad, err)
		}
	}
}

func TestSeqEncodingIsOrderedAndPrefixFree(t *testing.T) {
	seqs := []uint64{1, 2, 255, 256, 65535, 65536, 1 << 32, math.MaxUint64}
	for i, a := range seqs {
		ka := encodeSeq(a)
		seq, rest, err := splitSeq(append(bytes.Clone(ka), 0xaa))
		if err != nil || !bytes.Equal(seq, ka) || !bytes.Equal(rest, []byte{0xaa}) || seqValue(seq) != a {
			t.Fatalf("splitSeq(encodeSeq(%d)+aa) = %x %x %v", a, seq, rest, err)
		}
		for _, b := range seqs[i+1:] {
			kb := encodeSeq(b)
			if bytes.Compare(ka, kb) >= 0 || bytes.HasPrefix(kb, ka) {
				t.Errorf("encodeSeq(%d) = %x, encodeSeq(%d) = %x: not ordered or a prefix", a, ka, b, kb)
			}
		}
	}
	if got := len(encodeSeq(10000)); got != 3 {
		t.Errorf("sequence number 10000 takes %d bytes, want 3", got)
	}
	for _, bad := range [][]byte{nil, {2, 1}, {9, 1, 2, 3, 4, 5, 6, 7, 8, 9}} {
		if _, _, err := splitSeq(bad); !errors.Is(err, ErrCorrupt) {
			t.Errorf("splitSeq(%x) = %v, want ErrCorrupt", bad, err)
		}
	}
}

func TestEndpointCodecRoundTrips(t *testing.T) {
	hexE := hexID('e')
	at := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, ep := range []record.Endpoint{
		{ID: "e1"},
		{ID: "e1", Link: "ule1"},
		{ID: hexE, Link: "ule" + hexE[:12], MAC: "02:42:c6:12:00:01", IPv4: "198.18.1.50/24", IPv6: "2001:db8::50/64",
			Sandbox: "/var/run/docker/netns/0123456789ab", Boot: "6f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0",
			Lease: &record.Lease{Addr: "198.18.1.50/24", Routes: []record.LeaseRoute{{Dst: "10.0.0.0/8", Gateway: "198.18.1.254"}}, Acquired: at, T1: at, T2: at, Expiry: at},
			Plumb: &record.Plumb{IfName: "eth0", MTU: 1500, ParentIndex: 7, NetnsDev: 4, NetnsIno: 4026532999, Repairs: 2}},
		// Forms the compact encodings do not give back are kept as strings.
		{ID: hexE, Link: "ule9f8e7d6c5b4a", MAC: "02:42:C6:12:00:02", IPv4: "198.18.1.051/24", IPv6: "2001:DB8::51/64"},
		{ID: hexE, MAC: "02-42-c6-12-00-02", IPv4: "::ffff:10.0.0.1/120", IPv6: "10.0.0.1/24"},
		{ID: hexE, MAC: "02:42:c6:12:00:02:00:01", IPv4: "10.0.0.1", IPv6: "fe80::1"},
		{ID: hexE, IPv6: "::ffff:10.0.0.1/120"},
		{ID: hexE, Boot: "6F1E2D3C-4B5A-6978-8796-A5B4C3D2E1F0"},
		{ID: hexE, Boot: "6f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f"},
		{ID: hexE, Boot: "6f1e2d3c-4b5a-6978-8796+a5b4c3d2e1f0"},
		{ID: hexE, Boot: "6f1e2d3cx4b5a-6978-8796-a5b4c3d2e1f0"},
		// Links that end with the ID, or all of it, or are too short to.
		{ID: "endpoint-1", Link: "endpoint-1"},
		{ID: "endpoint-1", Link: "x-endpoint"},
		{ID: "ab", Link: "ule" + "ab"},
		{ID: hexE, Link: "ule" + hexE},
	} {
		v, err := encodeEndpoint(ep)
		if err != nil {
			t.Fatal(err)
		}
		ep.NetworkID = "n"
		got, err := decodeEndpoint("n", ep.ID, v)
		if err != nil || !reflect.DeepEqual(got, ep) {
			t.Errorf("endpoint %+v: got %+v, %v (value %x)", ep, got, err, v)
		}
	}
	// test/bench's endpoints: a link named after the ID and a MAC.
	id := "t00e0000000a" + strings.Repeat("0", 52)
	if v, _ := encodeEndpoint(record.Endpoint{ID: id, Link: "ule" + id[:12], MAC: "02:42:00:00:00:01"}); len(v) > 13 {
		t.Errorf("a plain endpoint takes %d bytes: %x", len(v), v)
	}
}

func TestEndpointCodecRefusesDamage(t *testing.T) {
	v, err := encodeEndpoint(record.Endpoint{ID: "e1", Link: "ule1", MAC: "02:42:c6:12:00:01", IPv6: "2001:db8::50/64", Lease: &record.Lease{Addr: "a"}})
	if err != nil {
		t.Fatal(err)
	}
	// Cut inside the link, the MAC, the address, the lease: each fails.
	// (A cut between fields is a valid shorter record.)
	for _, i := range []int{1, 3, 8, 20, len(v) - 1} {
		if _, err := decodeEndpoint("n", "e1", v[:i]); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "endpoint record e1 of network n") {
			t.Errorf("value cut to %d of %d bytes: %v, want ErrCorrupt naming the record", i, len(v), err)
		}
	}
	for _, bad := range [][]byte{{99}, {fieldLinkByID, 0, 200}, append([]byte{fieldLeaseJSON, 2}, "{x"...)} {
		if _, err := decodeEndpoint("n", "e1", bad); !errors.Is(err, ErrCorrupt) {
			t.Errorf("decode %x: %v, want ErrCorrupt", bad, err)
		}
	}
}

// TestEndpointCodecKeepsEveryField: an Endpoint with every field set (the
// lease's too) reads back the same, so a field added to Endpoint or Lease
// without a place in the binary value fails here rather than vanishing
// from the file.
func TestEndpointCodecKeepsEveryField(t *testing.T) {
	var ep record.Endpoint
	fill(t, reflect.ValueOf(&ep).Elem(), "f")
	v, err := encodeEndpoint(ep)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeEndpoint(ep.NetworkID, ep.ID, v)
	if err != nil || !reflect.DeepEqual(got, ep) {
		t.Fatalf("endpoint with every field set: got %+v, %v; want %+v", got, err, ep)
	}
}

// A network record keeps every field, the typed configuration
// (record.NetworkConfig) included; the value of a record written before
// it was kept (no "config") reads back with a zero one, which the
// driver's Restore fills from the options.
func TestNetworkCodecKeepsEveryField(t *testing.T) {
	var n record.Network
	fill(t, reflect.ValueOf(&n).Elem(), "f")
	seq := encodeSeq(7)
	v, err := networkValue(seq, n)
	if err != nil {
		t.Fatal(err)
	}
	got, gotSeq, err := decodeNetwork(n.ID, v)
	if err != nil || !reflect.DeepEqual(got, n) || !bytes.Equal(gotSeq, seq) {
		t.Fatalf("network with every field set: got %+v, %v; want %+v", got, err, n)
	}
	if n.Config == (record.NetworkConfig{}) {
		t.Fatal("fill left the typed configuration zero")
	}
	old := append(bytes.Clone(seq), `{"type":"macvlan","parent":"eth0","mode":"bridge","options":{"dhcp":"true","ipv6_mode":"slaac"}}`...)
	got, _, err = decodeNetwork("n", old)
	if err != nil || got.Config != (record.NetworkConfig{}) || got.Options["ipv6_mode"] != "slaac" {
		t.Fatalf("a schema 5 record without the typed configuration: %+v, %v", got, err)
	}
}

// fill sets every field reachable from v to a value of its own.
func fill(t *testing.T, v reflect.Value, name string) {
	switch {
	case v.Type() == reflect.TypeOf(time.Time{}):
		v.Set(reflect.ValueOf(time.Date(2025, 3, 1, 12, 0, len(name), 0, time.UTC)))
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(name)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64, reflect.Int32, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if v.CanInt() {
			v.SetInt(int64(len(name)))
		} else {
			v.SetUint(uint64(len(name)))
		}
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(t, v.Elem(), name)
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fill(t, v.Index(0), name+"0")
	case reflect.Map:
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(t, k, name+"k")
		fill(t, e, name+"v")
		v.Set(reflect.MakeMap(v.Type()))
		v.SetMapIndex(k, e)
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			fill(t, v.Field(i), name+"."+v.Type().Field(i).Name)
		}
	default:
		t.Fatalf("fill: no value for %s of kind %s", name, v.Kind())
	}
}

// FuzzEndpointCodec: any endpoint reads back as written; any value
// decodes or fails without a panic.
func FuzzEndpointCodec(f *testing.F) {
	hexE := hexID('e')
	f.Add(hexE, "ule"+hexE[:12], "02:42:c6:12:00:01", "198.18.1.50/24", "2001:db8::50/64", "/var/run/docker/netns/x", "6f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", "198.18.1.50/24")
	f.Add("e1", "ule1", "02:42:C6:12:00:01", "::ffff:10.0.0.1/120", "10.0.0.1/24", "", "", "")
	f.Fuzz(func(t *testing.T, id, link, mac, v4, v6, sandbox, boot, lease string) {
		ep := record.Endpoint{NetworkID: "n", ID: id, Link: link, MAC: mac, IPv4: v4, IPv6: v6, Sandbox: sandbox, Boot: boot}
		if utf8.ValidString(lease) && lease != "" { // JSON replaces invalid UTF-8
			ep.Lease = &record.Lease{Addr: lease}
		}
		v, err := encodeEndpoint(ep)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := decodeEndpoint("n", id, v); err != nil || !reflect.DeepEqual(got, ep) {
			t.Fatalf("%#v: value %x reads back as %#v, %v", ep, v, got, err)
		}
		_, _ = decodeEndpoint("n", id, []byte(link)) // arbitrary bytes
		if got, err := decodeID(encodeID(id)); err != nil || got != id {
			t.Fatalf("ID %q reads back as %q, %v", id, got, err)
		}
	})
}
