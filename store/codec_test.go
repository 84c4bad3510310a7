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
	for _, ep := range []Endpoint{
		{ID: "e1"},
		{ID: "e1", Link: "ule1"},
		{ID: hexE, Link: "ule" + hexE[:12], MAC: "02:42:c6:12:00:01", IPv4: "198.18.1.50/24", IPv6: "2001:db8::50/64",
			Sandbox: "/var/run/docker/netns/0123456789ab", Boot: "6f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0",
			Lease: &Lease{Addr: "198.18.1.50/24", Routes: []LeaseRoute{{Dst: "10.0.0.0/8", Gateway: "198.18.1.254"}}, Acquired: at, T1: at, T2: at, Expiry: at}},
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
	if v, _ := encodeEndpoint(Endpoint{ID: id, Link: "ule" + id[:12], MAC: "02:42:00:00:00:01"}); len(v) > 13 {
		t.Errorf("a plain endpoint takes %d bytes: %x", len(v), v)
	}
}

func TestEndpointCodecRefusesDamage(t *testing.T) {
	v, err := encodeEndpoint(Endpoint{ID: "e1", Link: "ule1", MAC: "02:42:c6:12:00:01", IPv6: "2001:db8::50/64", Lease: &Lease{Addr: "a"}})
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
