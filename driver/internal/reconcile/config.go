package reconcile

import (
	"fmt"

	"github.com/underlay-net/underlay/driver/internal/config"
	"github.com/underlay-net/underlay/store"
	"github.com/underlay-net/underlay/store/record"
)

// MigrateConfig gives the network records written before a record kept
// its options typed (record.NetworkConfig zero) their configuration,
// parsed from their options (config.ConfigFromOptions), and writes them
// back, in one transaction: the one migration of that change, run by
// Restore before anything reads the configuration. It returns how many
// records it changed; a record written by an older underlay after an
// upgrade and a downgrade is migrated again at the next start.
func (x *Executor) MigrateConfig() (int, error) {
	var migrated int
	err := x.Store.Update(func(tx *store.Tx) error {
		var old []record.Network
		if err := tx.ForEachNetwork(func(n record.Network) error {
			if n.Config == (record.NetworkConfig{}) {
				old = append(old, n)
			}
			return nil
		}); err != nil {
			return err
		}
		for _, n := range old {
			c, err := config.ConfigFromOptions(n.Options, n.Type)
			if err != nil {
				x.Log.Warn("a stored network's option no longer parses: its default is used", "network", n.ID, "error", err)
			}
			n.Config = c
			if err := tx.PutNetwork(n); err != nil {
				return fmt.Errorf("network %s: %w", n.ID, err)
			}
		}
		migrated = len(old)
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("type the options of the stored networks: %w", err)
	}
	return migrated, nil
}
