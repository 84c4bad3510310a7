//go:build vmdocker

// Package vmdocker drives underlay through a real Docker engine inside the
// project's test VM (test/vm/run.sh with VM_DOCKER=1, `make test-vm-docker`):
// what needs both Docker and a kernel module the host lacks (ipvlan,
// dummy). Each test starts, in a network namespace of its own, the dockerd
// bundled into the VM's initramfs with its libraries (Debian's 20.10, or
// with `make test-vm-docker-current` the current engine of
// engines/current.env and its runc: run.sh's VM_DOCKERD and VM_RUNC) and
// `underlay serve` as its legacy plugin, imports a busybox image with
// `docker import`, and runs containers with the docker CLI (Debian's
// 20.10, API 1.41, on both engines). What differs between the engines is
// written in the tests (engines_test.go's engine conditions).
package vmdocker

import (
	"testing"

	"github.com/underlay-net/underlay/internal/itest"
)

func TestMain(m *testing.M) { itest.Main(m) }
