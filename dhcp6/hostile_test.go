package dhcp6

import (
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/insomniacslk/dhcp/iana"
)

// setAddr replaces the address of out's IA_NA.
func setAddr(out *dhcpv6.Message, a string) {
	if ia := out.Options.OneIANA(); ia != nil {
		if x := ia.Options.OneAddress(); x != nil {
			x.IPv6Addr = net.ParseIP(a)
		}
	}
}

func TestRefusesSpecialAddresses(t *testing.T) {
	for _, bad := range []string{"fe80::1", "ff02::1", "::1", "::", "::ffff:192.0.2.1", "fec0::1", "::192.0.2.1"} {
		t.Run(bad, func(t *testing.T) {
			t.Parallel()
			// Advertised: never Requested.
			w := newWire(t)
			s := w.serve(1)
			s.set(func(s *fakeServer) { s.edit = func(_, out *dhcpv6.Message) { setAddr(out, bad) } })
			_, err := w.client().Acquire(ctxFor(t, 400*time.Millisecond), macvlanReq(1))
			if !errors.Is(err, ErrNoAnswer) || !strings.Contains(err.Error(), "ignored an ADVERTISE") {
				t.Errorf("Acquire: %v, want ErrNoAnswer saying the Advertise was ignored", err)
			}
			if n := len(s.messages(dhcpv6.MessageTypeRequest)); n != 0 {
				t.Errorf("%d Requests for %s", n, bad)
			}
			// Advertised fine, then given in the Reply: declined, refused.
			w = newWire(t)
			s = w.serve(1)
			s.set(func(s *fakeServer) {
				s.edit = func(in, out *dhcpv6.Message) {
					if in.MessageType == dhcpv6.MessageTypeRequest {
						setAddr(out, bad)
					}
				}
			})
			_, err = w.client().Acquire(ctxFor(t, 1200*time.Millisecond), macvlanReq(1))
			if !errors.Is(err, ErrUnusable) || !strings.Contains(err.Error(), "declined") {
				t.Errorf("Acquire: %v, want ErrUnusable with the address declined", err)
			}
			if len(s.declined) == 0 || s.declined[0] != netip.MustParseAddr(bad) {
				t.Errorf("declined %v, want %s", s.declined, bad)
			}
		})
	}
}

func TestLifetimes(t *testing.T) {
	h := time.Hour
	for _, tc := range []struct {
		name                string
		t1, t2, pref, valid time.Duration
		wantT1, wantT2      time.Duration
		refused, warn       string
	}{
		{name: "as given", t1: h, t2: 2 * h, pref: 3 * h, valid: 4 * h, wantT1: h, wantT2: 2 * h},
		{name: "T1 T2 0: 0.5 and 0.8 of preferred", pref: 10 * h, valid: 20 * h, wantT1: 5 * h, wantT2: 8 * h},
		{name: "T2 after valid: 0.8 of valid", t1: h, t2: 5 * h, pref: 2 * h, valid: 2 * h, wantT1: h, wantT2: 96 * time.Minute, warn: "T2"},
		{name: "T1 after T2", t1: 2 * h, t2: h, pref: 3 * h, valid: 4 * h, refused: "T1"},
		{name: "valid 0", pref: 0, valid: 0, refused: "valid for 0s"},
		{name: "valid 5s", pref: 5 * time.Second, valid: 5 * time.Second, refused: "valid for 5s"},
		{name: "preferred over valid", pref: 3 * h, valid: 2 * h, refused: "preferred lifetime"},
		{name: "infinite", t1: 0xffffffff * time.Second, t2: 0xffffffff * time.Second, pref: 0xffffffff * time.Second, valid: 0xffffffff * time.Second, wantT1: Infinite, wantT2: Infinite},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := newWire(t)
			s := w.serve(1)
			s.set(func(s *fakeServer) { s.t1, s.t2, s.preferred, s.valid = tc.t1, tc.t2, tc.pref, tc.valid })
			l, err := w.client().Acquire(ctxFor(t, 400*time.Millisecond), macvlanReq(1))
			if tc.refused != "" {
				if err == nil || !strings.Contains(err.Error(), tc.refused) {
					t.Errorf("Acquire: %v, %+v; want refused saying %q", err, l, tc.refused)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if l.T1 != tc.wantT1 || l.T2 != tc.wantT2 {
				t.Errorf("T1 %s T2 %s, want %s %s", l.T1, l.T2, tc.wantT1, tc.wantT2)
			}
			if (tc.warn == "") != (len(l.Warnings) == 0) || (tc.warn != "" && !strings.Contains(l.Warnings[0], tc.warn)) {
				t.Errorf("warnings %q, want %q", l.Warnings, tc.warn)
			}
		})
	}
}

func TestStatusCodes(t *testing.T) {
	noAddrs := func(in, out *dhcpv6.Message) {
		out.Options.Del(dhcpv6.OptionIANA)
		out.AddOption(&dhcpv6.OptIANA{IaId: in.Options.OneIANA().IaId, Options: dhcpv6.IdentityOptions{Options: dhcpv6.Options{
			&dhcpv6.OptStatusCode{StatusCode: iana.StatusNoAddrsAvail, StatusMessage: "pool full"}}}})
	}
	t.Run("NoAddrsAvail advertised", func(t *testing.T) {
		w := newWire(t)
		w.serve(1).set(func(s *fakeServer) { s.edit = noAddrs })
		_, err := w.client().Acquire(ctxFor(t, 400*time.Millisecond), macvlanReq(1))
		if !errors.Is(err, ErrNoAnswer) || !strings.Contains(err.Error(), "NoAddrsAvail") {
			t.Errorf("Acquire: %v, want ErrNoAnswer noting NoAddrsAvail", err)
		}
	})
	t.Run("NoAddrsAvail in the Reply", func(t *testing.T) {
		w := newWire(t)
		w.serve(1).set(func(s *fakeServer) {
			s.edit = func(in, out *dhcpv6.Message) {
				if in.MessageType == dhcpv6.MessageTypeRequest {
					noAddrs(in, out)
				}
			}
		})
		_, err := w.client().Acquire(ctxFor(t, 1200*time.Millisecond), macvlanReq(1))
		if !errors.Is(err, ErrNoAddrsAvail) {
			t.Errorf("Acquire: %v, want ErrNoAddrsAvail", err)
		}
	})
	renew := func(t *testing.T, fn func(s *fakeServer)) (Lease, error) {
		w := newWire(t)
		s := w.serve(1)
		c := w.client()
		r := macvlanReq(1)
		l, err := c.Acquire(ctxFor(t, 5*time.Second), r)
		if err != nil {
			t.Fatal(err)
		}
		s.set(fn)
		_, err = c.Renew(ctxFor(t, 400*time.Millisecond), l, r)
		return l, err
	}
	t.Run("NoBinding on Renew", func(t *testing.T) {
		_, err := renew(t, func(s *fakeServer) { clear(s.bindings) })
		if !errors.Is(err, ErrNoBinding) {
			t.Errorf("Renew: %v, want ErrNoBinding", err)
		}
	})
	t.Run("withdrawn on Renew", func(t *testing.T) {
		_, err := renew(t, func(s *fakeServer) { s.valid, s.preferred = 0, 0 })
		if !errors.Is(err, ErrNoBinding) {
			t.Errorf("Renew: %v, want ErrNoBinding", err)
		}
	})
	t.Run("another address on Renew", func(t *testing.T) {
		_, err := renew(t, func(s *fakeServer) {
			s.edit = func(_, out *dhcpv6.Message) { setAddr(out, "2001:db8:60::999") }
		})
		if !errors.Is(err, ErrNoBinding) {
			t.Errorf("Renew: %v, want ErrNoBinding", err)
		}
	})
	t.Run("UseMulticast on Renew", func(t *testing.T) {
		l, err := renew(t, func(s *fakeServer) {
			s.edit = func(_, out *dhcpv6.Message) {
				out.Options.Del(dhcpv6.OptionIANA)
				out.AddOption(&dhcpv6.OptStatusCode{StatusCode: iana.StatusUseMulticast})
			}
		})
		if !errors.Is(err, ErrRefused) || errors.Is(err, ErrNoBinding) || !strings.Contains(err.Error(), "the lease holds until") {
			t.Errorf("Renew: %v, want ErrRefused with the lease standing", err)
		}
		_ = l
	})
	t.Run("Release answered with an error", func(t *testing.T) {
		w := newWire(t)
		s := w.serve(1)
		c := w.client()
		r := macvlanReq(1)
		l, err := c.Acquire(ctxFor(t, 5*time.Second), r)
		if err != nil {
			t.Fatal(err)
		}
		s.set(func(s *fakeServer) { s.releaseStatus = iana.StatusUnspecFail })
		if err := c.Release(ctxFor(t, 5*time.Second), l, r); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "UnspecFail") {
			t.Errorf("Release: %v, want ErrRefused naming UnspecFail", err)
		}
		if _, err := c.Acquire(ctxFor(t, 5*time.Second), r); err != nil {
			t.Errorf("Acquire after a refused Release: %v", err)
		}
	})
	t.Run("Release unanswered", func(t *testing.T) {
		w := newWire(t)
		s := w.serve(1)
		c := w.client()
		r := macvlanReq(1)
		l, err := c.Acquire(ctxFor(t, 5*time.Second), r)
		if err != nil {
			t.Fatal(err)
		}
		s.set(func(s *fakeServer) { s.script = func(*dhcpv6.Message) []*dhcpv6.Message { return []*dhcpv6.Message{} } })
		if err := c.Release(ctxFor(t, 10*time.Second), l, r); !errors.Is(err, ErrNoAnswer) {
			t.Errorf("Release: %v, want ErrNoAnswer", err)
		}
		if n := len(s.messages(dhcpv6.MessageTypeRelease)); n != maxSends {
			t.Errorf("%d Releases sent, want %d", n, maxSends)
		}
	})
}

// TestIgnoresOthersReplies: replies with another transaction ID, another
// client ID, to another MAC, without a server ID, or from a server not
// asked, come before the right one; only the right one is taken.
func TestIgnoresOthersReplies(t *testing.T) {
	w := newWire(t)
	s := w.serve(1)
	r := macvlanReq(1)
	s.set(func(s *fakeServer) {
		s.misdirected = map[*dhcpv6.Message]bool{}
		s.script = func(in *dhcpv6.Message) []*dhcpv6.Message {
			good := s.answer(in)
			if len(good) != 1 {
				return good
			}
			var out []*dhcpv6.Message
			bad := func(fn func(m *dhcpv6.Message)) {
				d, _ := dhcpv6.FromBytes(good[0].ToBytes())
				m := d.(*dhcpv6.Message)
				setAddr(m, "2001:db8:60::bad")
				fn(m)
				out = append(out, m)
			}
			bad(func(m *dhcpv6.Message) { m.TransactionID[0] ^= 0xff })
			bad(func(m *dhcpv6.Message) {
				m.UpdateOption(dhcpv6.OptClientID(&dhcpv6.DUIDLL{HWType: iana.HWTypeEthernet, LinkLayerAddr: testMAC(9)}))
			})
			bad(func(m *dhcpv6.Message) { s.misdirected[m] = true })
			bad(func(m *dhcpv6.Message) { m.Options.Del(dhcpv6.OptionServerID) })
			if in.MessageType != dhcpv6.MessageTypeSolicit { // any server may advertise
				bad(func(m *dhcpv6.Message) {
					m.UpdateOption(dhcpv6.OptServerID(&dhcpv6.DUIDLL{HWType: iana.HWTypeEthernet, LinkLayerAddr: testMAC(8)}))
				})
			}
			bad(func(m *dhcpv6.Message) { m.MessageType = dhcpv6.MessageTypeReconfigure })
			return append(out, good...)
		}
	})
	l, err := w.client().Acquire(ctxFor(t, 5*time.Second), r)
	if err != nil {
		t.Fatal(err)
	}
	if l.Addr != netip.MustParseAddr("2001:db8:60::100") {
		t.Errorf("leased %s, want 2001:db8:60::100 (a bogus reply was taken)", l.Addr)
	}
	renewed, err := w.client().Renew(ctxFor(t, 5*time.Second), l, r)
	if err != nil || renewed.Addr != l.Addr {
		t.Errorf("Renew: %s, %v; want %s", renewed.Addr, err, l.Addr)
	}
}

// TestMalformedFrames: garbage on the wire is dropped, never a panic.
func TestMalformedFrames(t *testing.T) {
	w := newWire(t)
	s := w.serve(1)
	r := macvlanReq(1)
	good := udpFrame(s.mac, r.MAC, s.ll, LinkLocal(r.MAC), serverPort, clientPort, []byte{7, 1, 2, 3, 0, 1, 0, 200, 1})
	frames := [][]byte{nil, {1}, make([]byte, 60), good[:ethHeader+ipv6Header+3], good}
	for i := range len(good) {
		f := append([]byte(nil), good...)
		f[i] ^= 0xff
		frames = append(frames, f)
	}
	s.set(func(s *fakeServer) {
		s.script = func(*dhcpv6.Message) []*dhcpv6.Message {
			for _, f := range frames {
				w.inject(f)
			}
			s.script = nil
			return nil
		}
	})
	if _, err := w.client().Acquire(ctxFor(t, 5*time.Second), r); err != nil {
		t.Fatal(err)
	}
}
