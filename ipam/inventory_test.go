package ipam

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/underlay-net/underlay/internal/pluginapi"
	"github.com/underlay-net/underlay/store"
	"github.com/underlay-net/underlay/store/record"
)

// ReleaseLeaked checks again, in its transaction, that nothing uses the
// pool: not a pending create, not a network of underlay, not a subnet of
// any Docker network.
func TestReleaseLeaked(t *testing.T) {
	e := newEnv(t, nil, nil)
	grace := time.Minute
	used := e.pool(t, LocalSpace, "198.18.1.0/24", "", nil, false)
	docker := e.pool(t, LocalSpace, "198.18.2.0/24", "", nil, false)
	leaked := e.pool(t, LocalSpace, "198.18.3.0/24", "", nil, false)
	auto := e.pool(t, LocalSpace, "", "", nil, false) // reserved until Docker uses it
	if err := e.db.Update(func(tx *store.Tx) error {
		return tx.PutNetwork(record.Network{ID: "n1", Type: "macvlan", Parent: "eth0", Mode: "bridge", IPv4: []record.Pool{{Subnet: "198.18.1.0/24"}}})
	}); err != nil {
		t.Fatal(err)
	}
	dockerSubnets := []netip.Prefix{netip.MustParsePrefix("198.18.2.128/25")}
	refused := func(id, why string) {
		t.Helper()
		_, err := e.m.ReleaseLeaked(ctx, id, grace, dockerSubnets)
		if !errors.Is(err, pluginapi.ErrConflict) || !strings.Contains(err.Error(), why) {
			t.Errorf("release of %s: %v, want a refusal saying %q", id, err, why)
		}
	}
	refused(leaked.ID, "was handed out")
	e.clock.Advance(2 * time.Minute)
	refused(used.ID, "used by a network of underlay")
	refused(docker.ID, "overlaps Docker's network subnet 198.18.2.128/25")
	if res, err := e.m.ReleaseLeaked(ctx, leaked.ID, grace, dockerSubnets); err != nil || !strings.Contains(res, "released pool") {
		t.Errorf("leaked pool: %q, %v", res, err)
	}
	// The auto pool's reservation expired (1 minute): released.
	if res, err := e.m.ReleaseLeaked(ctx, auto.ID, grace, dockerSubnets); err != nil || !strings.Contains(res, "released pool") {
		t.Errorf("expired reservation: %q, %v", res, err)
	}
	pools, err := e.m.Pools(ctx)
	if err != nil || len(pools) != 2 {
		t.Errorf("pools left: %+v, %v", pools, err)
	}
}
