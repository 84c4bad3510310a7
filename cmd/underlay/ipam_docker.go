package main

import (
	"context"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/underlay-net/underlay/dockerapi"
	"github.com/underlay-net/underlay/ipam"
)

var _ ipam.Known = (*dockerSubnets)(nil)

// dockerSubnetsEvery is how often Docker's networks are listed again while
// the IPAM is in use.
const dockerSubnetsEvery = 3 * time.Second

// dockerSubnets is ipam.Known over the Docker Engine API: the subnets of
// every network Docker knows (any driver, any IPAM: a macvlan network of
// Docker's own, or one another underlay with its own state file made),
// listed in the background. The IPAM reads the last list and never waits
// for Docker: dockerd calls IPAM while it starts, before its API answers,
// and waits for the answer. Nothing is listed until the IPAM is in use
// (Wanted), so a daemon whose IPAM nobody uses never asks Docker.
type dockerSubnets struct {
	list  func(context.Context) ([]dockerapi.Network, error)
	every time.Duration
	log   *slog.Logger
	want  chan struct{}

	mu      sync.Mutex
	subnets []netip.Prefix
	// asOf is when the listing of subnets was asked for.
	asOf time.Time
}

// startDockerSubnets returns the list, refreshed every dockerSubnetsEvery
// from the first Wanted until ctx ends.
func startDockerSubnets(ctx context.Context, list func(context.Context) ([]dockerapi.Network, error), log *slog.Logger) *dockerSubnets {
	s := newDockerSubnets(list, dockerSubnetsEvery, log)
	go s.run(ctx)
	return s
}

func newDockerSubnets(list func(context.Context) ([]dockerapi.Network, error), every time.Duration, log *slog.Logger) *dockerSubnets {
	return &dockerSubnets{list: list, every: every, log: log, want: make(chan struct{}, 1)}
}

// KnownSubnets implements ipam.Known: the subnets last listed, and when
// that listing was asked for.
func (s *dockerSubnets) KnownSubnets() ([]netip.Prefix, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.subnets), s.asOf
}

// Wanted implements ipam.Known: the first call starts the listing.
func (s *dockerSubnets) Wanted() {
	select {
	case s.want <- struct{}{}:
	default: // already told
	}
}

// run lists Docker's networks from the first Wanted on, every s.every,
// until ctx ends. A failed listing keeps the last list; it is logged once
// until a listing succeeds again.
func (s *dockerSubnets) run(ctx context.Context) {
	select {
	case <-ctx.Done():
		return
	case <-s.want:
	}
	failing := false
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		asked := time.Now()
		nets, err := s.list(ctx)
		switch {
		case err != nil && ctx.Err() != nil:
			return
		case err != nil:
			if !failing {
				s.log.Warn("cannot list Docker's networks: automatic IPAM pools avoid the subnets listed before (if any) and the host's and underlay's own, not networks Docker made since; listing again every "+s.every.String(), "error", err)
			}
			failing = true
		default:
			if failing {
				s.log.Info("Docker's networks listed again: automatic IPAM pools avoid their subnets")
			}
			failing = false
			s.set(nets, asked)
		}
		t.Reset(s.every)
	}
}

// set replaces the list with the subnets of nets, in canonical form.
func (s *dockerSubnets) set(nets []dockerapi.Network, asked time.Time) {
	var subnets []netip.Prefix
	for _, n := range nets {
		for _, sub := range n.Subnets {
			if p, err := netip.ParsePrefix(sub); err == nil {
				subnets = append(subnets, p.Masked())
			}
		}
	}
	slices.SortFunc(subnets, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	subnets = slices.Compact(subnets)
	s.mu.Lock()
	changed := !slices.Equal(s.subnets, subnets)
	s.subnets, s.asOf = subnets, asked
	s.mu.Unlock()
	if changed {
		s.log.Debug("Docker's subnets listed: automatic IPAM pools avoid them", "subnets", len(subnets))
	}
}
