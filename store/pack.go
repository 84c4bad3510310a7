package store

import (
	bolt "go.etcd.io/bbolt"
)

// How full bbolt packs the pages of the buckets with a key per network or
// endpoint.
//
// bbolt splits a node that outgrew its page only at commit, into pages
// filled to the bucket's FillPercent, which it does not store: every write
// transaction sets it again. Neither value suits every write:
//
//   - 50% (bbolt's default) suits keys that land among existing ones one
//     at a time: a full page that takes one more key splits in two halves
//     with room for the next ones. Pages filled to 100% would instead shed
//     a two-key page at every such insert; a test of 100,000 random link
//     names left them 15% used (70% at 50%).
//   - 100% suits keys that land next to each other: a bulk load, a new
//     network's endpoints (their keys start with its sequence number, the
//     highest), or any key past the last one. The pages they fill get no
//     keys between theirs later, except through the first case; at 50%
//     they would stay half empty for good (in the schema 3 file of
//     test/bench's 10,000 networks, the networks and the link index were
//     47% used).
//
// So a transaction packs a bucket's pages full when at least 90% of the
// keys it added to it are next to another key it added (the key before it
// is one, or no key follows it): then most of the nodes it split hold
// mostly new keys. Otherwise, or with no key added, the default applies.

const (
	packedFill = 1.0
	// packMaxTracked bounds the keys remembered per bucket and transaction;
	// past it, the decision made so far stands.
	packMaxTracked = 1 << 16
)

// added is what one transaction added to one bucket.
type added struct {
	keys     map[string]struct{}
	empty    bool // the bucket had no key at the first write: all new keys are adjacent
	n, close int  // keys added, and of those next to another added key
	frozen   bool
}

// put writes a key of one of the big flat buckets and sets the bucket's
// fill for the transaction's commit.
func (t *Tx) put(b *bolt.Bucket, k, v []byte) error {
	t.pack(b, k)
	return b.Put(k, v)
}

// setAdd adds a member to a set of a set index (tx.go) whose nested
// buckets are many, setting the index's fill as put does.
func (t *Tx) setAdd(index *bolt.Bucket, key, member string) error {
	if index.Bucket([]byte(key)) == nil {
		t.pack(index, []byte(key))
	}
	return indexAdd(index, key, member)
}

// pack counts k, about to be written to b, and sets b's fill.
func (t *Tx) pack(b *bolt.Bucket, k []byte) {
	a := t.added[b]
	if a == nil {
		if t.added == nil {
			t.added = map[*bolt.Bucket]*added{}
		}
		first, _ := b.Cursor().First()
		a = &added{keys: map[string]struct{}{}, empty: first == nil}
		t.added[b] = a
	}
	if !a.frozen {
		a.note(b, k)
	}
	if a.n > 0 && a.close*10 >= a.n*9 {
		b.FillPercent = packedFill
	} else {
		b.FillPercent = bolt.DefaultFillPercent
	}
}

// note counts k, unless it is already in the bucket (a rewrite).
func (a *added) note(b *bolt.Bucket, k []byte) {
	c := b.Cursor()
	next, _ := c.Seek(k)
	if next != nil && string(next) == string(k) {
		return
	}
	a.n++
	if a.empty || next == nil {
		a.close++
	} else if prev, _ := c.Prev(); prev != nil {
		if _, ok := a.keys[string(prev)]; ok {
			a.close++
		}
	}
	if a.empty {
		return // no need to remember keys
	}
	a.keys[string(k)] = struct{}{}
	if len(a.keys) >= packMaxTracked {
		a.frozen = true
		a.keys = nil
	}
}
