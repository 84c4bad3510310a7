package leases

import (
	"context"
	"log/slog"
	"net/netip"
	"time"

	"github.com/underlay-net/underlay/dhcp"
	"github.com/underlay-net/underlay/store/record"
)

// Family is what the lifecycle needs of one lease family: its client,
// its record in the endpoint's, its plan and its words. DHCP and DHCP6
// are the two; the Leaser is written once over them.
type Family[L, R any] interface {
	// HasClient says whether the daemon has a client of the family.
	HasClient() bool
	// On says whether the network takes addresses of the family.
	On(n record.Network) bool
	// Of is the endpoint's lease of the family (nil: none); With sets it.
	Of(ep record.Endpoint) *L
	With(ep record.Endpoint, l *L) record.Endpoint
	// Facts are what the lifecycle reads of a lease; Answer is its
	// address as CreateEndpoint answers it.
	Facts(l L) Facts
	Answer(l L) string
	// Expired says whether the lease has ended at now.
	Expired(l L, now time.Time) bool
	// MarkLost records the lease lost at now (once) for why.
	MarkLost(l L, now time.Time, why string) L
	// Next is when to act on the lease next; Due is whether a renewal
	// is due at now, and when it is if not; Resume is when to act on it
	// first after the daemon started at now (never before now).
	Next(l L, now time.Time) time.Time
	Due(l L, now time.Time) (next time.Time, due bool)
	Resume(l L, now time.Time) time.Time
	// Exchange bounds one renewal's exchange begun at now.
	Exchange(ctx context.Context, n record.Network, l L, now time.Time) (context.Context, context.CancelFunc)
	// Request is the request for the endpoint's lease.
	Request(ctx context.Context, links LinkGetter, n record.Network, ep record.Endpoint) (R, error)
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
	Entry(n record.Network, ep record.Endpoint, r R, l L) record.PendingRelease
	FromEntry(p record.PendingRelease) (R, L, bool)
	// NoLease is the error of an acquire that got no lease.
	NoLease(n record.Network, ep record.Endpoint, timeout time.Duration, err error) error
	// Leased and Renewed are the attributes of the logs of a lease
	// acquired and renewed; RenewFailed logs a renewal that failed.
	Leased(l L) []any
	Renewed(l L) []any
	RenewFailed(log *slog.Logger, l L, next time.Time, err error)
	// Words are the family's names and log messages.
	Words() Words
}

// Facts are what the lifecycle reads of a lease, whatever its family.
type Facts struct {
	Addr     netip.Addr // invalid when the record's is not an address
	Text     string     // the address as recorded: the journal's key
	Acquired time.Time  // when it was granted
	Lost     time.Time  // when it was lost (zero: held)
	LostWhy  string
	Expiry   time.Time // when it ends (zero: never)
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

// two is a word of each family.
type two = [2]string

// pairs are the families' words side by side: DHCP's, then DHCPv6's.
type pairs struct {
	Name, Option, Pool, Leased, Declined, NoDecline, Released, NoRelease [2]string
	Renewed, NotWonBack, WonBack, NoRecord, ExpiredWhy, Lost, LostAsk    [2]string
	NoRecordLvl                                                          [2]slog.Level
	Background                                                           [2]bool
	CommitRetry, LockRetry                                               [2]time.Duration
}

var words = pairs{
	Name:   two{"DHCP", "DHCPv6"},
	Option: two{"dhcp=true", "ipv6_mode=dhcpv6"},
	Pool:   two{"pool", "range"},
	Leased: two{"leased address", "leased IPv6 address"},
	Declined: two{"declined a DHCP offer that is not free",
		"declined a DHCPv6 address that is not free"},
	NoDecline: two{"could not send DHCPDECLINE", "could not send a DHCPv6 Decline"},
	Released:  two{"released DHCP lease", "released IPv6 address"},
	NoRelease: two{"could not release DHCP lease: the next start tries again; the server frees it when it expires",
		"could not release a DHCPv6 lease: the next start tries again (journal); the server frees it when it expires"},
	Renewed:    two{"renewed DHCP lease", "renewed IPv6 address"},
	NotWonBack: two{"lost DHCP lease not won back yet; asking again", "could not win a lost DHCPv6 lease back"},
	WonBack: two{"won a lost DHCP lease back: the container sends from its address again",
		"won a lost IPv6 address back: the container sends from it again"},
	NoRecord:    two{"record DHCP lease", "could not record a DHCPv6 lease: trying again shortly"},
	NoRecordLvl: [2]slog.Level{slog.LevelError, slog.LevelWarn},
	ExpiredWhy:  two{"the lease expired without a renewal", "it expired without a renewal"},
	Lost:        two{"DHCP lease lost", "lost a DHCPv6 lease"},
	LostAsk:     two{"", "underlay asks for it every 30s; "},
	Background:  [2]bool{false, true},
	CommitRetry: [2]time.Duration{dhcp.MinRetryShort, 5 * time.Second},
	LockRetry:   [2]time.Duration{dhcp.MinRetry, lostLeaseRetry},
}

// of is one family's words (0: DHCP, 1: DHCPv6).
func (p *pairs) of(i int) Words {
	return Words{Name: p.Name[i], Option: p.Option[i], Pool: p.Pool[i], Leased: p.Leased[i], Declined: p.Declined[i],
		NoDecline: p.NoDecline[i], Released: p.Released[i], NoRelease: p.NoRelease[i], Renewed: p.Renewed[i],
		NotWonBack: p.NotWonBack[i], WonBack: p.WonBack[i], NoRecord: p.NoRecord[i], NoRecordLvl: p.NoRecordLvl[i],
		ExpiredWhy: p.ExpiredWhy[i], Lost: p.Lost[i], LostAsk: p.LostAsk[i], Background: p.Background[i],
		CommitRetry: p.CommitRetry[i], LockRetry: p.LockRetry[i]}
}

// dhcpWords and dhcp6Words are read only.
var dhcpWords, dhcp6Words = words.of(0), words.of(1)
