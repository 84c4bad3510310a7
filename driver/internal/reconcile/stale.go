package reconcile

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/underlay-net/underlay/driver/internal/plan"
	"github.com/underlay-net/underlay/internal/dockerid"
	"github.com/underlay-net/underlay/store/record"
)

// The stale-holder check: a conflicting holder is a stale record (its
// network was removed while underlay could not see it) only if Docker
// says, in its own words, that it does not know the network, and the
// holder is old enough for Docker to have stored it: libnetwork calls the
// driver's CreateNetwork before it writes the network to its own store, so
// a holder created a moment ago is unknown to Docker yet.
//
// The check is bounded as a whole: every holder is asked at once, the first
// live or unanswerable holder ends it (refused), and a grace wait follows
// only when Docker said 404 for a holder younger than the grace period.

// NetworkChecker asks Docker whether a network still exists
// (dockerapi.Client); an error means it could not tell.
type NetworkChecker interface {
	NetworkExists(ctx context.Context, id string) (bool, error)
}

// Checker asks Docker about a request's conflicting holders.
type Checker struct {
	Docker NetworkChecker // nil: every holder is live
	Grace  time.Duration  // how old a holder must be before a 404 is believed
	Lookup time.Duration  // the time the check waits on Docker, besides the grace wait
	Now    func() time.Time
	Log    *slog.Logger
}

// Check returns nil when Docker no longer knows any of the holders of cs
// and each is older than the grace period (waiting for the young ones and
// asking again); otherwise the request's refusal (plan.ConflictError),
// saying when Docker could not be asked.
func (c *Checker) Check(ctx context.Context, want record.Network, asked string, cs []plan.Conflict) error {
	if c.Docker == nil {
		return plan.ConflictError(want, asked, cs)
	}
	holders := make([]record.Network, len(cs))
	for i, cf := range cs {
		holders[i] = cf.Holder
	}
	// One deadline for the whole check: a lookup's time on Docker plus the
	// grace wait, however many holders and however many questions.
	checkCtx, cancel := context.WithTimeout(ctx, c.Lookup+c.Grace)
	defer cancel()
	if err := c.refuseIfLive(checkCtx, want, asked, cs, holders); err != nil {
		return err
	}
	// Docker said 404 for every holder. Those younger than the grace period
	// may be networks libnetwork has not stored yet: wait until the
	// youngest is old enough, then ask about them again.
	var young []record.Network
	var wait time.Duration
	now := c.Now()
	for _, h := range holders {
		// A clock stepped back makes a holder look younger than it can be:
		// the wait is never longer than the grace period.
		if age := min(max(now.Sub(h.Created), 0), c.Grace); !h.Created.IsZero() && age < c.Grace {
			young = append(young, h)
			wait = max(wait, c.Grace-age)
		}
	}
	if len(young) == 0 {
		return nil
	}
	c.Log.Info("Docker does not know a conflicting holder yet, but it is younger than the grace period: asking again when it is old enough",
		"network", want.ID, "holder", young[0].ID, "holders", len(young), "wait", wait)
	t := time.NewTimer(wait)
	select {
	case <-ctx.Done():
		t.Stop()
		return fmt.Errorf("waiting to ask Docker again about network %s, which holds parent %s: %w", dockerid.Short(young[0].ID), want.Parent, ctx.Err())
	case <-t.C:
	}
	return c.refuseIfLive(checkCtx, want, asked, cs, young)
}

// answer is what Docker said of one holder.
type answer struct {
	holder record.Network
	live   bool
	err    error
}

// askDocker asks Docker about every holder concurrently. It returns the
// first holder Docker knows or could not answer for (nil when Docker said
// 404 for all of them) without waiting for the other answers.
func (c *Checker) askDocker(ctx context.Context, holders []record.Network) *answer {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	answers := make(chan answer, len(holders))
	for _, h := range holders {
		go func() {
			live, err := c.Docker.NetworkExists(ctx, h.ID)
			answers <- answer{holder: h, live: live, err: err}
		}()
	}
	for range holders {
		if a := <-answers; a.live || a.err != nil {
			return &a
		}
	}
	return nil
}

// refuseIfLive asks Docker about holders and answers the refusal if any of
// them is live or Docker could not say.
func (c *Checker) refuseIfLive(ctx context.Context, want record.Network, asked string, cs []plan.Conflict, holders []record.Network) error {
	a := c.askDocker(ctx, holders)
	if a == nil {
		return nil
	}
	refusal := plan.ConflictError(want, asked, cs)
	if a.err != nil {
		c.Log.Warn("could not ask Docker whether a conflicting holder still exists; treating it as live",
			"network", want.ID, "holder", a.holder.ID, "error", a.err)
		return fmt.Errorf("%w. Docker could not be asked whether network %s still exists, so it counts as live (%v): check --docker-host (DOCKER_HOST)",
			refusal, dockerid.Short(a.holder.ID), a.err)
	}
	return refusal
}
