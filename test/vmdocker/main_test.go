//go:build vmdocker

// Package vmdocker drives underlay through a real Docker engine inside the
// project's test VM (test/vm/run.sh with VM_DOCKER=1, `make test-vm-docker`):
// what needs both Docker and a kernel module the host lacks (ipvlan). The
// test binary starts, in a network namespace of its own, Debian's dockerd
// 20.10 (bundled into the VM's initramfs with its libraries) and
// `underlay serve` as its legacy plugin, imports a busybox image with
// `docker import`, and runs containers with the docker CLI.
package vmdocker

import (
	"testing"

	"github.com/underlay-net/underlay/internal/itest"
)

func TestMain(m *testing.M) { itest.Main(m) }
