package netlinkutil

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// Addresses a container must stop sending from (a DHCP lease lost or
// refused) are blocked on the parent's egress: an nftables netdev table
// "underlay" with one egress chain per parent ("lost-" + the parent's
// name) drops IPv4 packets with the address as source and ARP packets
// with it as sender address. Frames a macvlan or ipvlan child sends out
// leave through its lower link's egress, so this works for both, without
// entering the container (CAP_NET_ADMIN only). Traffic between containers
// of one macvlan bridge never reaches the parent's egress and is not
// blocked. Needs nf_tables with the netdev egress hook (Linux 5.16).

const (
	lostTable       = "underlay"
	lostChainPrefix = "lost-"
)

// Blocked is an address blocked on a parent, with the tag Block was given.
type Blocked struct {
	Parent string
	Addr   netip.Addr
	Tag    string
}

func (k *Kernel) nft() (*nftables.Conn, error) {
	var opts []nftables.ConnOption
	if k.ns.IsOpen() {
		opts = append(opts, nftables.WithNetNSFd(int(k.ns)))
	}
	c, err := nftables.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("open nftables: %w", err)
	}
	return c, nil
}

// lostRules are the two rules blocking addr (IPv4 source; ARP sender).
func lostRules(t *nftables.Table, ch *nftables.Chain, addr netip.Addr, tag string) []*nftables.Rule {
	a := addr.As4()
	rule := func(proto uint16, offset uint32) *nftables.Rule {
		return &nftables.Rule{Table: t, Chain: ch, UserData: []byte(tag + " " + addr.String()), Exprs: []expr.Any{
			&expr.Meta{Key: expr.MetaKeyPROTOCOL, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{byte(proto >> 8), byte(proto)}},
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: 4},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: a[:]},
			&expr.Counter{},
			&expr.Verdict{Kind: expr.VerdictDrop},
		}}
	}
	// IPv4: the source address at 12; ARP (Ethernet, IPv4): the sender's
	// protocol address at 14.
	return []*nftables.Rule{rule(unix.ETH_P_IP, 12), rule(unix.ETH_P_ARP, 14)}
}

// Block drops what leaves parent from the IPv4 address addr, until
// Unblock. tag identifies the caller (its mark) in the rules; blocking an
// address already blocked with that tag is not an error.
func (k *Kernel) Block(ctx context.Context, parent string, addr netip.Addr, tag string) error {
	if !addr.Is4() {
		return fmt.Errorf("block %s on %s: only IPv4 addresses are blocked", addr, parent)
	}
	have, err := k.BlockedAddrs(ctx)
	if err != nil {
		return err
	}
	for _, b := range have {
		if b.Parent == parent && b.Addr == addr && b.Tag == tag {
			return nil
		}
	}
	c, err := k.nft()
	if err != nil {
		return err
	}
	t := c.AddTable(&nftables.Table{Family: nftables.TableFamilyNetdev, Name: lostTable})
	accept := nftables.ChainPolicyAccept
	ch := c.AddChain(&nftables.Chain{Name: lostChainPrefix + parent, Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookEgress, Priority: nftables.ChainPriorityFilter, Device: parent, Policy: &accept})
	for _, r := range lostRules(t, ch, addr, tag) {
		c.AddRule(r)
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("block %s on %s with nftables (netdev egress, needs nf_tables and Linux 5.16 or later): %w", addr, parent, err)
	}
	return nil
}

// Unblock removes what Block(parent, addr, tag) added; the chain goes with
// its last rule, the table with its last chain. Nothing blocked is not an
// error.
func (k *Kernel) Unblock(ctx context.Context, parent string, addr netip.Addr, tag string) error {
	c, err := k.nft()
	if err != nil {
		return err
	}
	t, ch, rules, err := lostChain(c, parent)
	if err != nil || ch == nil {
		return err
	}
	want := tag + " " + addr.String()
	left := 0
	for _, r := range rules {
		if string(r.UserData) != want {
			left++
			continue
		}
		if err := c.DelRule(r); err != nil {
			return fmt.Errorf("unblock %s on %s: %w", addr, parent, err)
		}
	}
	if left == 0 {
		c.DelChain(ch)
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("unblock %s on %s: %w", addr, parent, err)
	}
	if left == 0 {
		if chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyNetdev); err == nil && !anyChainOf(chains, lostTable) {
			c.DelTable(t)
			_ = c.Flush() // another instance may have added a chain meanwhile
		}
	}
	return nil
}

func anyChainOf(chains []*nftables.Chain, table string) bool {
	for _, ch := range chains {
		if ch.Table != nil && ch.Table.Name == table {
			return true
		}
	}
	return false
}

// lostChain finds the parent's chain and its rules; nil when none.
func lostChain(c *nftables.Conn, parent string) (*nftables.Table, *nftables.Chain, []*nftables.Rule, error) {
	t := &nftables.Table{Family: nftables.TableFamilyNetdev, Name: lostTable}
	ch, err := c.ListChain(t, lostChainPrefix+parent)
	if errors.Is(err, unix.ENOENT) || (err != nil && strings.Contains(err.Error(), "no such file")) {
		return t, nil, nil, nil
	}
	if err != nil {
		return t, nil, nil, fmt.Errorf("read nftables chain %s: %w", lostChainPrefix+parent, err)
	}
	rules, err := c.GetRules(t, ch)
	if err != nil {
		return t, nil, nil, fmt.Errorf("read nftables chain %s: %w", lostChainPrefix+parent, err)
	}
	return t, ch, rules, nil
}

// BlockedAddrs lists the blocked addresses of every parent.
func (k *Kernel) BlockedAddrs(ctx context.Context) ([]Blocked, error) {
	c, err := k.nft()
	if err != nil {
		return nil, err
	}
	chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyNetdev)
	if err != nil {
		return nil, fmt.Errorf("list nftables chains: %w", err)
	}
	var out []Blocked
	for _, ch := range chains {
		if ch.Table == nil || ch.Table.Name != lostTable || !strings.HasPrefix(ch.Name, lostChainPrefix) {
			continue
		}
		rules, err := c.GetRules(ch.Table, ch)
		if err != nil {
			return nil, fmt.Errorf("read nftables chain %s: %w", ch.Name, err)
		}
		seen := map[string]bool{}
		for _, r := range rules {
			tag, a, ok := strings.Cut(string(r.UserData), " ")
			addr, perr := netip.ParseAddr(a)
			if !ok || perr != nil || seen[string(r.UserData)] {
				continue
			}
			seen[string(r.UserData)] = true
			out = append(out, Blocked{Parent: strings.TrimPrefix(ch.Name, lostChainPrefix), Addr: addr, Tag: tag})
		}
	}
	return out, nil
}
