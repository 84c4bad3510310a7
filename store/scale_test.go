package store

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/underlay-net/underlay/store/record"
	bolt "go.etcd.io/bbolt"
)

// The state test/bench/scale_test.go's fillState writes (10,000 networks,
// 10 endpoints each, in transactions of 500 networks through the public
// API), filled the same way here so the file's size and the cost of
// reading it back are measured without a daemon.

const (
	scaleNets   = 10000
	scaleEpsPer = 10
)

// scaleID is test/bench's id(): 64 characters, but not Docker's hex (the
// prefix), so kept whole in keys.
func scaleID(prefix string, w, i int) string {
	return fmt.Sprintf("%s%03x%08x%052d", prefix, w, i, 0)
}

// dockerID is an ID of Docker's form for the same numbers.
func dockerID(prefix string, w, i int) string {
	return fmt.Sprintf("%x%03x%08x%052d", prefix[0]&15, w, i, 0)
}

func fillScale(tb testing.TB, db *DB, nets, epsPer, perParent int) {
	fillScaleIDs(tb, db, nets, epsPer, perParent, scaleID)
}

func fillScaleIDs(tb testing.TB, db *DB, nets, epsPer, perParent int, id func(string, int, int) string) {
	tb.Helper()
	const chunk = 500
	for start := 0; start < nets; start += chunk {
		err := db.Update(func(tx *Tx) error {
			for i := start; i < start+chunk && i < nets; i++ {
				parent := fmt.Sprintf("p%04d", i/perParent)
				if i < perParent-1 {
					parent = "vp0"
				}
				a := i * 16
				n := record.Network{ID: id("s", 0, i), Type: "macvlan", Parent: parent, Mode: "bridge",
					IPv4: []record.Pool{{Subnet: fmt.Sprintf("10.%d.%d.%d/28", a>>16&255, a>>8&255, a&255)}}}
				if err := tx.PutNetwork(n); err != nil {
					return err
				}
				for e := 0; e < epsPer; e++ {
					epID := id("t", e, i)
					if err := tx.PutEndpoint(record.Endpoint{NetworkID: n.ID, ID: epID, Link: "ule" + epID[:12], MAC: "02:42:00:00:00:01"}); err != nil {
						return err
					}
				}
			}
			return nil
		})
		if err != nil {
			tb.Fatal(err)
		}
	}
}

// readAll reads what the daemon reads at start (Inventory, the reconcile executor's snapshot):
// every network with its endpoints, the parent use, the parent links and
// the pending networks.
func readAll(tx *Tx) (nets, eps int, err error) {
	err = tx.ForEachNetwork(func(n record.Network) error {
		nets++
		e, err := tx.Endpoints(n.ID)
		eps += len(e)
		return err
	})
	if err != nil {
		return
	}
	tx.ParentUse()
	if _, err = tx.ParentLinks(); err != nil {
		return
	}
	_, err = tx.Pending()
	return
}

// TestScaleStateSize fills the benchmark's state and holds the file to
// 20 MiB, and the same with IDs of Docker's form; with -v it logs where
// the bytes go, bucket by bucket, and how long reading it all back takes.
func TestScaleStateSize(t *testing.T) {
	if testing.Short() || raceDetector {
		t.Skip("fills 110,000 records: not with -short or -race")
	}
	for _, c := range []struct {
		name string
		id   func(string, int, int) string
	}{{"bench IDs", scaleID}, {"Docker IDs", dockerID}} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "scale.db")
			db := open(t, path)
			start := time.Now()
			fillScaleIDs(t, db, scaleNets, scaleEpsPer, 10, c.id)
			t.Logf("fill: %v", time.Since(start))
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("file: %d bytes (%.1f MiB)", fi.Size(), float64(fi.Size())/(1<<20))
			logBuckets(t, path)

			db = open(t, path)
			defer db.Close()
			start = time.Now()
			var nets, eps int
			mustView(t, db, func(tx *Tx) (err error) { nets, eps, err = readAll(tx); return err })
			t.Logf("read all, first time after opening: %v", time.Since(start))
			if nets != scaleNets || eps != scaleNets*scaleEpsPer {
				t.Fatalf("read back %d networks, %d endpoints", nets, eps)
			}
			if fi.Size() > 20<<20 {
				t.Fatalf("state file of %d networks with %d endpoints each is %.1f MiB, want <= 20 MiB", scaleNets, scaleEpsPer, float64(fi.Size())/(1<<20))
			}
		})
	}
}

// logBuckets logs each top-level bucket's pages and how full they are.
func logBuckets(t *testing.T, path string) {
	raw, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	_ = raw.View(func(tx *bolt.Tx) error {
		t.Logf("pages up to the high-water mark: %d bytes (%.1f MiB)", tx.Size(), float64(tx.Size())/(1<<20))
		return tx.ForEach(func(name []byte, b *bolt.Bucket) error {
			s := b.Stats()
			alloc := s.BranchAlloc + s.LeafAlloc
			if alloc == 0 {
				return nil
			}
			t.Logf("%-20s keys %6d sub-buckets %5d pages %5d+%5d: %5.1f MiB, %3.0f%% used",
				name, s.KeyN, s.BucketN-1, s.BranchPageN, s.LeafPageN, float64(alloc)/(1<<20),
				100*float64(s.BranchInuse+s.LeafInuse)/float64(alloc))
			return nil
		})
	})
	st := raw.Stats()
	t.Logf("free pages: %d", st.FreePageN)
}

func benchDB(b *testing.B) *DB {
	db, err := Open(filepath.Join(b.TempDir(), "scale.db"), Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	fillScale(b, db, scaleNets, scaleEpsPer, 10)
	return db
}

// cpuPerOp reports the process's CPU time (user and system) per
// iteration of the loop it is deferred around, beside the wall time, which
// other loads on the machine and the disk's fsyncs make noisy.
func cpuPerOp(b *testing.B) func() {
	cpu := func() time.Duration {
		var ru syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	start := cpu()
	return func() { b.ReportMetric(float64(cpu()-start)/float64(b.N), "cpu-ns/op") }
}

// BenchmarkRestoreRead is one read of everything the daemon reads at start.
func BenchmarkRestoreRead(b *testing.B) {
	db := benchDB(b)
	defer cpuPerOp(b)()
	for b.Loop() {
		if err := db.View(func(tx *Tx) error { _, _, err := readAll(tx); return err }); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPutDeleteEndpoint is a request's write path on the big state:
// one committed transaction adding an endpoint, one deleting it.
func BenchmarkPutDeleteEndpoint(b *testing.B) {
	db := benchDB(b)
	i := 0
	defer cpuPerOp(b)()
	for b.Loop() {
		ep := benchEndpoint(i)
		i++
		if err := db.Update(func(tx *Tx) error { return tx.PutEndpoint(ep) }); err != nil {
			b.Fatal(err)
		}
		if err := db.Update(func(tx *Tx) error { return tx.DeleteEndpoint(ep.NetworkID, ep.ID) }); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPutDeleteEndpointTx is the same work without the commits (the
// transaction is rolled back): what the layout costs, fsync left out.
func BenchmarkPutDeleteEndpointTx(b *testing.B) {
	db := benchDB(b)
	i := 0
	defer cpuPerOp(b)()
	for b.Loop() {
		ep := benchEndpoint(i)
		i++
		_ = db.bolt.Update(func(btx *bolt.Tx) error {
			tx := &Tx{tx: btx}
			if err := tx.PutEndpoint(ep); err != nil {
				b.Fatal(err)
			}
			if err := tx.DeleteEndpoint(ep.NetworkID, ep.ID); err != nil {
				b.Fatal(err)
			}
			return errRollback
		})
	}
}

var errRollback = fmt.Errorf("roll back")

// benchEndpoint is the i-th endpoint the write benchmarks add and delete,
// on one of the big state's networks.
func benchEndpoint(i int) record.Endpoint {
	epID := scaleID("u", 0, i)
	return record.Endpoint{NetworkID: scaleID("s", 0, i*7919%scaleNets), ID: epID, Link: "ulx" + epID[4:16], MAC: "02:42:00:00:00:02", IPv4: "10.0.0.2/28"}
}
