package netlinkutil

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/underlay-net/underlay/netlinkutil/kernel"
	"golang.org/x/sys/unix"
)

// Addresses a container must stop sending from (a DHCP lease lost or
// refused) are blocked on the parent's egress: an nftables netdev table of
// the caller's own (lostTablePrefix + the tag's instance: two instances on
// one host never touch each other's) with one egress chain per parent
// ("lost-" + the parent's name, which is the chain's device) drops IPv4
// packets with the address as source and ARP packets with it as sender
// address, or, for an IPv6 address,
// IPv6 packets with it as source (Linux answers a neighbour solicitation
// for an address from that address, so its advertisements are dropped
// too; what the container sends from its link-local address, router and
// neighbour solicitations, MLD, passes). Frames a macvlan or ipvlan
// child sends out leave through its lower link's egress, so this works for
// both, without entering the container (CAP_NET_ADMIN only). Traffic
// between containers of one macvlan bridge never reaches the parent's
// egress and is not blocked. Needs nf_tables with the netdev egress hook
// (Linux 5.16). The changes of one Kernel are serialized.
//
// A renamed parent: until Linux 6.15 a netdev chain's hook stays on the
// device it was made for, whatever its name; since 6.16 it is bound to
// the name (a renamed device leaves the hook, a device that takes the name
// joins it), so the renamed parent's frames are no longer dropped and a
// new link with the old name would have them dropped. MoveBlocks moves a
// parent's blocks to its new name (an owned VLAN an operator renamed,
// followed: driver/internal/links Follow); the chain then hooks the same
// device on every kernel.

const (
	lostTablePrefix = "underlay-"
	lostChainPrefix = "lost-"
)

// Blocked is an address blocked on a parent, with the tag Block was given.
type Blocked struct {
	Parent string
	Addr   netip.Addr
	Tag    string
}

// lostTable is the table of a tag ("underlay:ID" -> "underlay-ID").
func lostTable(tag string) *nftables.Table {
	name := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return -1
	}, strings.TrimPrefix(tag, kernel.MarkPrefix))
	return &nftables.Table{Family: nftables.TableFamilyNetdev, Name: lostTablePrefix + name}
}

// nft runs op on a fresh nftables connection of the Kernel's namespace,
// one at a time, and turns a panic of the library into an error.
func (k *Kernel) nft(what string, op func(c *nftables.Conn) error) (err error) {
	k.nftMu.Lock()
	defer k.nftMu.Unlock()
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%s: nftables failed: %v (is nf_tables loaded? modprobe nf_tables)", what, r)
		}
	}()
	var opts []nftables.ConnOption
	if k.ns.IsOpen() {
		opts = append(opts, nftables.WithNetNSFd(int(k.ns)))
	}
	c, err := nftables.New(opts...)
	if err != nil {
		return fmt.Errorf("%s: open nftables: %w", what, err)
	}
	return op(c)
}

// lostChain is the egress chain of parent in table t.
func lostChain(t *nftables.Table, parent string) *nftables.Chain {
	accept := nftables.ChainPolicyAccept
	return &nftables.Chain{Name: lostChainPrefix + parent, Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookEgress, Priority: nftables.ChainPriorityFilter, Device: parent, Policy: &accept}
}

// lostRules are the rules blocking addr: for IPv4 its source and ARP
// sender, for IPv6 its source.
func lostRules(t *nftables.Table, ch *nftables.Chain, addr netip.Addr, tag string) []*nftables.Rule {
	rule := func(proto uint16, offset uint32, a []byte) *nftables.Rule {
		return &nftables.Rule{Table: t, Chain: ch, UserData: []byte(tag + " " + addr.String()), Exprs: []expr.Any{
			&expr.Meta{Key: expr.MetaKeyPROTOCOL, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{byte(proto >> 8), byte(proto)}},
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: uint32(len(a))},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: a},
			&expr.Counter{},
			&expr.Verdict{Kind: expr.VerdictDrop},
		}}
	}
	if addr.Is6() {
		a := addr.As16()
		// IPv6: the source address at 8.
		return []*nftables.Rule{rule(unix.ETH_P_IPV6, 8, a[:])}
	}
	a := addr.As4()
	// IPv4: the source address at 12; ARP (Ethernet, IPv4): the sender's
	// protocol address at 14.
	return []*nftables.Rule{rule(unix.ETH_P_IP, 12, a[:]), rule(unix.ETH_P_ARP, 14, a[:])}
}

// Block drops what leaves parent from the address addr (IPv4, or IPv6
// other than a mapped IPv4 address), until Unblock. tag identifies the
// caller (its mark); blocking an address already blocked on that parent
// with that tag is not an error.
func (k *Kernel) Block(ctx context.Context, parent string, addr netip.Addr, tag string) error {
	if !addr.IsValid() || addr.Is4In6() || addr.Zone() != "" {
		return fmt.Errorf("block %q on %s: want an IPv4 or IPv6 address without a zone", addr, parent)
	}
	what := fmt.Sprintf("block %s on %s", addr, parent)
	return k.nft(what, func(c *nftables.Conn) error {
		have, err := blocked(c, tag)
		if err != nil {
			return err
		}
		for _, b := range have {
			if b.Parent == parent && b.Addr == addr {
				return nil
			}
		}
		t := c.AddTable(lostTable(tag))
		ch := c.AddChain(lostChain(t, parent))
		for _, r := range lostRules(t, ch, addr, tag) {
			c.AddRule(r)
		}
		if err := c.Flush(); err != nil {
			return fmt.Errorf("%s with nftables (netdev egress, needs nf_tables and Linux 5.16 or later): %w", what, err)
		}
		return nil
	})
}

// Unblock removes what Block added for addr with tag, in every chain of
// the tag's table (a parent renamed and not moved keeps its chain's old
// name); a
// chain goes with its last rule, the table with its last chain. Nothing
// blocked is not an error.
func (k *Kernel) Unblock(ctx context.Context, parent string, addr netip.Addr, tag string) error {
	what := fmt.Sprintf("unblock %s on %s", addr, parent)
	return k.nft(what, func(c *nftables.Conn) error {
		t := lostTable(tag)
		chains, err := tableChains(c, t.Name)
		if err != nil || len(chains) == 0 {
			return err
		}
		want := tag + " " + addr.String()
		left := len(chains)
		changed := false
		for _, ch := range chains {
			rules, err := c.GetRules(t, ch)
			if err != nil {
				return fmt.Errorf("%s: read chain %s: %w", what, ch.Name, err)
			}
			kept := 0
			for _, r := range rules {
				if string(r.UserData) != want {
					kept++
					continue
				}
				if err := c.DelRule(r); err != nil {
					return fmt.Errorf("%s: %w", what, err)
				}
				changed = true
			}
			if kept == 0 {
				c.DelChain(ch)
				left--
				changed = true
			}
		}
		if left == 0 {
			c.DelTable(t)
		}
		if !changed {
			return nil
		}
		if err := c.Flush(); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	})
}

// MoveBlocks moves the blocks of tag on the parent named from to its new
// name to: in one nftables transaction, so that no moment is without
// them, the chain of to gets the rules it lacks and from's rules go, and
// its chain with them when nothing else is left in it. It returns the
// addresses moved; nothing blocked on from is not an error. to must name
// a link until Linux 6.16 (the chain's device).
func (k *Kernel) MoveBlocks(ctx context.Context, from, to, tag string) ([]netip.Addr, error) {
	if from == to {
		return nil, nil
	}
	what := fmt.Sprintf("move the blocked addresses of %s's chain %s%s to %s%s", tag, lostChainPrefix, from, lostChainPrefix, to)
	var moved []netip.Addr
	err := k.nft(what, func(c *nftables.Conn) error {
		t := lostTable(tag)
		chains, err := tableChains(c, t.Name)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		var old, cur *nftables.Chain
		for _, ch := range chains {
			switch ch.Name {
			case lostChainPrefix + from:
				old = ch
			case lostChainPrefix + to:
				cur = ch
			}
		}
		if old == nil {
			return nil
		}
		rules, err := c.GetRules(t, old)
		if err != nil {
			return fmt.Errorf("%s: read chain %s: %w", what, old.Name, err)
		}
		have := map[string]bool{}
		if cur != nil {
			curRules, err := c.GetRules(t, cur)
			if err != nil {
				return fmt.Errorf("%s: read chain %s: %w", what, cur.Name, err)
			}
			for _, r := range curRules {
				have[string(r.UserData)] = true
			}
		}
		ch := c.AddChain(lostChain(t, to))
		kept := 0
		for _, r := range rules {
			rtag, a, ok := strings.Cut(string(r.UserData), " ")
			addr, perr := netip.ParseAddr(a)
			if !ok || perr != nil || rtag != tag {
				kept++ // not a rule of Block's: left where it is
				continue
			}
			if !have[string(r.UserData)] {
				have[string(r.UserData)] = true
				moved = append(moved, addr)
				for _, nr := range lostRules(t, ch, addr, tag) {
					c.AddRule(nr)
				}
			}
			if err := c.DelRule(r); err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
		}
		if kept == 0 {
			c.DelChain(old)
		}
		if err := c.Flush(); err != nil {
			moved = nil
			return fmt.Errorf("%s with nftables (the chain's device %s must exist until Linux 6.16): %w", what, to, err)
		}
		return nil
	})
	return moved, err
}

// tableChains lists the chains of a netdev table; none when it is absent.
func tableChains(c *nftables.Conn, table string) ([]*nftables.Chain, error) {
	all, err := c.ListChainsOfTableFamily(nftables.TableFamilyNetdev)
	if errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list nftables chains: %w", err)
	}
	var out []*nftables.Chain
	for _, ch := range all {
		if ch != nil && ch.Table != nil && ch.Table.Name == table && strings.HasPrefix(ch.Name, lostChainPrefix) {
			out = append(out, ch)
		}
	}
	return out, nil
}

// blocked lists the blocks of the tag's table.
func blocked(c *nftables.Conn, tag string) ([]Blocked, error) {
	t := lostTable(tag)
	chains, err := tableChains(c, t.Name)
	if err != nil {
		return nil, err
	}
	var out []Blocked
	for _, ch := range chains {
		rules, err := c.GetRules(t, ch)
		if err != nil {
			return nil, fmt.Errorf("read nftables chain %s: %w", ch.Name, err)
		}
		seen := map[string]bool{}
		for _, r := range rules {
			rtag, a, ok := strings.Cut(string(r.UserData), " ")
			addr, perr := netip.ParseAddr(a)
			if !ok || perr != nil || rtag != tag || seen[string(r.UserData)] {
				continue
			}
			seen[string(r.UserData)] = true
			out = append(out, Blocked{Parent: strings.TrimPrefix(ch.Name, lostChainPrefix), Addr: addr, Tag: rtag})
		}
	}
	return out, nil
}

// BlockedAddrs lists the addresses blocked with tag.
func (k *Kernel) BlockedAddrs(ctx context.Context, tag string) ([]Blocked, error) {
	var out []Blocked
	err := k.nft("list blocked addresses", func(c *nftables.Conn) (err error) {
		out, err = blocked(c, tag)
		return err
	})
	return out, err
}
