package itest

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"
)

// Ping sends ICMP echo requests from the address src (local in namespace
// from) to dst until an echo reply from dst arrives or timeout passes, as
// `ping -I src dst` would; it returns nil once one arrived. It uses a raw
// ICMP socket opened in from (root), so it needs no ping binary and no
// ping_group_range. IPv6 addresses ping with ICMPv6.
func Ping(from *Netns, src, dst string, timeout time.Duration) error {
	s, d := netip.MustParseAddr(src), netip.MustParseAddr(dst)
	if s.Is4() != d.Is4() {
		return fmt.Errorf("ping %s -> %s: not one address family", src, dst)
	}
	// ICMPv6 (RFC 4443): echo request 128, reply 129; the kernel fills in
	// the checksum, with the pseudo-header.
	proto, request, reply := "ip4:icmp", byte(8), byte(0)
	if s.Is6() {
		proto, request, reply = "ip6:ipv6-icmp", 128, 129
	}
	var c net.PacketConn
	if err := from.Do(func() (err error) {
		c, err = net.ListenPacket(proto, src)
		return err
	}); err != nil {
		return fmt.Errorf("ICMP socket on %s: %w", src, err)
	}
	defer c.Close()
	var idb [2]byte
	_, _ = rand.Read(idb[:])
	id := binary.BigEndian.Uint16(idb[:])
	to := &net.IPAddr{IP: d.AsSlice()}
	deadline := time.Now().Add(timeout)
	buf := make([]byte, 1500)
	var lastErr error
	for seq := uint16(1); time.Now().Before(deadline); seq++ {
		if _, err := c.WriteTo(echoRequest(request, id, seq), to); err != nil {
			lastErr = err
		}
		wait := time.Now().Add(200 * time.Millisecond)
		if wait.After(deadline) {
			wait = deadline
		}
		_ = c.SetReadDeadline(wait)
		for {
			k, peer, err := c.ReadFrom(buf)
			if err != nil {
				if !errors.Is(err, net.ErrClosed) && !isTimeout(err) {
					lastErr = err
				}
				break
			}
			// A raw socket sees every ICMP message of the namespace: only
			// the reply to this pinger from dst counts.
			ip, ok := peer.(*net.IPAddr)
			if ok && ip.IP.Equal(d.AsSlice()) && k >= 8 && buf[0] == reply && buf[1] == 0 && binary.BigEndian.Uint16(buf[4:]) == id {
				return nil
			}
		}
	}
	if lastErr != nil {
		return fmt.Errorf("no echo reply from %s to %s within %s (last error: %w)", dst, src, timeout, lastErr)
	}
	return fmt.Errorf("no echo reply from %s to %s within %s", dst, src, timeout)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// echoRequest is an ICMP echo request with its checksum.
func echoRequest(typ byte, id, seq uint16) []byte {
	b := make([]byte, 8, 8+16)
	b[0] = typ // echo request, code 0
	binary.BigEndian.PutUint16(b[4:], id)
	binary.BigEndian.PutUint16(b[6:], seq)
	b = append(b, "underlay itest.."...)
	var sum uint32
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	binary.BigEndian.PutUint16(b[2:], ^uint16(sum))
	return b
}
