package leases

import (
	"context"
	"log/slog"
	"net/netip"
	"time"

	"github.com/underlay-net/underlay/store"
)

// Family is what the lifecycle needs of one lease family: its client,
// its record in the endpoint's, its plan and its words. DHCP and DHCP6
// are the two; the Leaser is written once over them.
type Family[L, R any] interface {
	// HasClient says whether the daemon has a client of the family.
	HasClient() bool
	// On says whether the network takes addresses of the family.
	On(n store.Network) bool
	// Of is the endpoint's lease of the family (nil: none); With sets it.
	Of(ep store.Endpoint) *L
	With(ep store.Endpoint, l *L) store.Endpoint
	// Addr is the lease's address; Text is it as recorded (the
	// journal's key); Answer is it as CreateEndpoint answers it.
	Addr(l L) netip.Addr
	Text(l L) string
	Answer(l L) string
	// Acquired and Lost are the lease's times of grant and loss.
	Acquired(l L) time.Time
	Lost(l L) time.Time
	// Expiry is when the lease ends (zero: never); Expired says whether
	// it has at now.
	Expiry(l L) time.Time
	Expired(l L, now time.Time) bool
	// MarkLost records the lease lost at now (once) for why.
	MarkLost(l L, now time.Time, why string) L
	// Next is when to act on the lease next; Due is whether a renewal
	// is due at now, and when it is if not.
	Next(l L, now time.Time) time.Time
	Due(l L, now time.Time) (next time.Time, due bool)
	// Exchange bounds one renewal's exchange begun at now.
	Exchange(ctx context.Context, n store.Network, l L, now time.Time) (context.Context, context.CancelFunc)
	// Request is the request for the endpoint's lease.
	Request(ctx context.Context, links LinkGetter, n store.Network, ep store.Endpoint) (R, error)
	// Acquire asks for a lease; only, when valid, is the one address to
	// ask for (a lost lease's, won back).
	Acquire(ctx context.Context, r R, only netip.Addr) (L, error)
	// Renew extends a held lease as its plan says at now.
	Renew(ctx context.Context, r R, l L, now time.Time) (L, error)
	// Refused says whether err is the server's refusal of the lease
	// (then it is lost) and why.
	Refused(err error) (why string, ok bool)
	// Release gives a lease back, Decline an offered one in use.
	Release(ctx context.Context, r R, l L) error
	Decline(ctx context.Context, r R, l L) error
	// Entry is the journal entry of a lease (without Since); FromEntry
	// the request and lease of one of the family's entries (false for
	// another family's).
	Entry(n store.Network, ep store.Endpoint, r R, l L) store.PendingRelease
	FromEntry(p store.PendingRelease) (R, L, bool)
	// NoLease is the error of an acquire that got no lease.
	NoLease(n store.Network, ep store.Endpoint, timeout time.Duration, err error) error
	// Leased and Renewed are the attributes of the logs of a lease
	// acquired and renewed; RenewFailed logs a renewal that failed.
	Leased(l L) []any
	Renewed(l L) []any
	RenewFailed(log *slog.Logger, l L, next time.Time, err error)
	// Words are the family's names and log messages.
	Words() *Words
}

// Words are a family's names and the messages that differ by family
// (operators and tests grep them: they stay as they were).
type Words struct {
	Name        string // "DHCP", "DHCPv6"
	Option      string // the network option that asks for the family
	Pool        string // what the server's addresses are called
	Leased      string
	Declined    string
	NoDecline   string // a Decline that could not be sent
	Released    string
	NoRelease   string // a release that failed
	Renewed     string
	NotWonBack  string
	WonBack     string
	NoRecord    string // a renewal's outcome that could not be recorded
	NoRecordLvl slog.Level
	ExpiredWhy  string
	Lost        string // how a loss begins its messages
	LostAsk     string // what a loss says of asking again
	// Background: a release goes out in the background (it waits up to
	// its retransmissions for a silent server), not within the request.
	Background bool
	// CommitRetry is how soon an outcome that could not be recorded is
	// acted on again; LockRetry one whose record could not be read.
	CommitRetry, LockRetry time.Duration
}
