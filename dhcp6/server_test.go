package dhcp6

import (
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/insomniacslk/dhcp/iana"
)

// fakeServer is a scriptable in-process DHCPv6 server: it hands out
// addresses of 2001:db8:60::/64 from ::100 by (DUID, IAID), with the
// lifetimes and times set, answers every message type a client sends,
// and lets a test change each answer (edit) or answer in its place
// (script). It records what it got.
type fakeServer struct {
	mac  net.HardwareAddr
	ll   netip.Addr
	duid dhcpv6.DUID

	mu               sync.Mutex
	preferred, valid time.Duration
	t1, t2           time.Duration
	preference       int // -1: no option
	rapid            bool
	bindings         map[string]netip.Addr
	offers           map[string]netip.Addr
	next             int
	got              []*dhcpv6.Message
	declined         []netip.Addr
	edit             func(in, out *dhcpv6.Message)
	script           func(in *dhcpv6.Message) []*dhcpv6.Message // nil answers: the normal one
	misdirected      map[*dhcpv6.Message]bool                   // framed to another MAC
	releaseStatus    iana.StatusCode
	renewStatus      *dhcpv6.OptStatusCode // in the IA_NA of Renew/Rebind Replies
}

func (w *wire) serve(id byte) *fakeServer {
	mac := net.HardwareAddr{0x02, 0, 0, 0, 0xee, id}
	s := &fakeServer{mac: mac, ll: LinkLocal(mac), duid: &dhcpv6.DUIDLL{HWType: iana.HWTypeEthernet, LinkLayerAddr: mac},
		preferred: time.Hour, valid: 2 * time.Hour, t1: 30 * time.Minute, t2: 48 * time.Minute, preference: -1,
		bindings: map[string]netip.Addr{}, offers: map[string]netip.Addr{}}
	w.mu.Lock()
	w.servers = append(w.servers, s)
	w.mu.Unlock()
	return s
}

func (s *fakeServer) set(fn func(s *fakeServer)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fn(s)
}

func (s *fakeServer) messages(typ dhcpv6.MessageType) []*dhcpv6.Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*dhcpv6.Message
	for _, m := range s.got {
		if m.MessageType == typ {
			out = append(out, m)
		}
	}
	return out
}

func (s *fakeServer) binding(duid []byte, iaid [4]byte) (netip.Addr, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.bindings[string(duid)+string(iaid[:])]
	return a, ok
}

// handle answers one message.
func (s *fakeServer) handle(in *dhcpv6.Message) []*dhcpv6.Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, in)
	if s.script != nil {
		if out := s.script(in); out != nil {
			return out
		}
	}
	return s.answer(in)
}

// answer is the normal answer to in, edited; s.mu is held.
func (s *fakeServer) answer(in *dhcpv6.Message) []*dhcpv6.Message {
	if sid := in.Options.ServerID(); sid != nil && !sid.Equal(s.duid) {
		return nil
	}
	cid := in.Options.ClientID()
	ia := in.Options.OneIANA()
	if cid == nil || ia == nil {
		return nil
	}
	key := string(cid.ToBytes()) + string(ia.IaId[:])
	out := &dhcpv6.Message{TransactionID: in.TransactionID, MessageType: dhcpv6.MessageTypeReply}
	out.AddOption(dhcpv6.OptClientID(cid))
	out.AddOption(dhcpv6.OptServerID(s.duid))
	addr, bound := s.bindings[key]
	grant := func() {
		if a, ok := s.offers[key]; !bound && ok {
			addr = a
		} else if !bound {
			addr = netip.MustParseAddr("2001:db8:60::100")
			for range s.next {
				addr = addr.Next()
			}
			s.next++
			s.offers[key] = addr
		}
		out.AddOption(&dhcpv6.OptIANA{IaId: ia.IaId, T1: s.t1, T2: s.t2, Options: dhcpv6.IdentityOptions{Options: dhcpv6.Options{
			&dhcpv6.OptIAAddress{IPv6Addr: addr.AsSlice(), PreferredLifetime: s.preferred, ValidLifetime: s.valid}}}})
	}
	switch in.MessageType {
	case dhcpv6.MessageTypeSolicit:
		grant()
		if s.rapid && in.GetOneOption(dhcpv6.OptionRapidCommit) != nil {
			dhcpv6.WithRapidCommit(out)
			s.bindings[key] = addr
		} else {
			out.MessageType = dhcpv6.MessageTypeAdvertise
		}
		if s.preference >= 0 {
			out.AddOption(dhcpv6.OptPreference(uint8(s.preference)))
		}
	case dhcpv6.MessageTypeRequest:
		grant()
		s.bindings[key] = addr
	case dhcpv6.MessageTypeRenew, dhcpv6.MessageTypeRebind:
		switch {
		case !bound:
			out.AddOption(&dhcpv6.OptIANA{IaId: ia.IaId, Options: dhcpv6.IdentityOptions{Options: dhcpv6.Options{
				&dhcpv6.OptStatusCode{StatusCode: iana.StatusNoBinding, StatusMessage: "no binding"}}}})
		case s.renewStatus != nil:
			out.AddOption(&dhcpv6.OptIANA{IaId: ia.IaId, Options: dhcpv6.IdentityOptions{Options: dhcpv6.Options{s.renewStatus}}})
		default:
			grant()
		}
	case dhcpv6.MessageTypeRelease, dhcpv6.MessageTypeDecline:
		if in.MessageType == dhcpv6.MessageTypeDecline {
			if a := ia.Options.OneAddress(); a != nil {
				d, _ := netip.AddrFromSlice(a.IPv6Addr)
				s.declined = append(s.declined, d)
			}
		}
		delete(s.bindings, key)
		if in.MessageType == dhcpv6.MessageTypeDecline {
			delete(s.offers, key)
		}
		out.AddOption(&dhcpv6.OptStatusCode{StatusCode: s.releaseStatus, StatusMessage: "as scripted"})
	default:
		return nil
	}
	if s.edit != nil {
		s.edit(in, out)
	}
	return []*dhcpv6.Message{out}
}

func (s *fakeServer) isMisdirected(m *dhcpv6.Message) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.misdirected[m]
}
