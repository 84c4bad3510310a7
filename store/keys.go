package store

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/bits"
)

// Key encodings of schema 4. Keys are most of the file: every endpoint's
// key holds its network's and its own ID, so both are kept short.

// ID encodings: Docker's IDs are 64 lowercase hex characters and are kept
// as their 32 bytes; any other ID (tests, other engines) is kept as it is
// behind its own tag, so every string encodes and decodes exactly. Within
// each tag the encoding keeps the IDs' order; hex IDs sort first.
const (
	idHex  = 0x00 // 32 bytes follow: a 64-character lowercase hex ID
	idText = 0x01 // the ID's bytes follow, as they are
)

// encodeID is the key form of a Docker ID.
func encodeID(id string) []byte {
	if len(id) == 64 && isLowerHex(id) {
		out := make([]byte, 33)
		out[0] = idHex
		_, _ = hex.Decode(out[1:], []byte(id))
		return out
	}
	out := make([]byte, 0, 1+len(id))
	return append(append(out, idText), id...)
}

// decodeID reverses encodeID.
func decodeID(b []byte) (string, error) {
	switch {
	case len(b) == 33 && b[0] == idHex:
		return hex.EncodeToString(b[1:]), nil
	case len(b) >= 1 && b[0] == idText:
		return string(b[1:]), nil
	}
	return "", fmt.Errorf("%w: ID key %x has no known encoding", ErrCorrupt, b)
}

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Network sequence numbers: every network gets one when its record is
// first written (never reused), and its endpoints' keys start with it
// instead of the network's ID. It is encoded as one length byte and the
// number's big-endian bytes without leading zeros: short (3 bytes up to
// 65,535 networks ever created), prefix-free, so a network's endpoints are
// exactly the keys that start with it, and ordered, so a new network's
// endpoints go at the end of the bucket.

func encodeSeq(seq uint64) []byte {
	n := (bits.Len64(seq) + 7) / 8
	out := make([]byte, 1+n)
	out[0] = byte(n)
	for i := n; i > 0; i-- {
		out[i] = byte(seq)
		seq >>= 8
	}
	return out
}

// splitSeq splits an encoded sequence number off the front of b.
func splitSeq(b []byte) (seq, rest []byte, err error) {
	if len(b) == 0 || int(b[0]) > 8 || len(b) < 1+int(b[0]) {
		return nil, nil, fmt.Errorf("%w: sequence number %x is malformed", ErrCorrupt, b)
	}
	n := 1 + int(b[0])
	return b[:n], b[n:], nil
}

// seqValue reads an encoded sequence number (for messages and tests).
func seqValue(seq []byte) uint64 {
	var buf [8]byte
	copy(buf[8-len(seq)+1:], seq[1:])
	return binary.BigEndian.Uint64(buf[:])
}

// endpointKey is an endpoint's key: its network's sequence number, then
// its own encoded ID.
func endpointKey(seq []byte, id string) []byte {
	return append(bytes.Clone(seq), encodeID(id)...)
}

// linkRefLen bounds how much of an endpoint's encoded ID the link index
// keeps: the tag and 7 bytes (14 hex characters) tell a network's
// endpoints apart in practice; should two share them, EndpointByLink reads
// both and compares their links (linkTarget).
const linkRefLen = 8

// linkRef is the link index's value for an endpoint key: the network's
// sequence number and the start of the endpoint's encoded ID.
func linkRef(key []byte) ([]byte, error) {
	seq, id, err := splitSeq(key)
	if err != nil {
		return nil, err
	}
	return key[:len(seq)+min(len(id), linkRefLen)], nil
}
