//go:build bench

package bench

import "testing"

func benchDocker(t *testing.T, tb *table) {}
