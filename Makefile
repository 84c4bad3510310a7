# underlay: build, run, test, package.
#
#   sudo make run        build and run the daemon with its default state
#   sudo make test       the full suite CI runs (installs what it needs as root)
#   make bench           benchmarks: one table, and docs/bench-endpoint-cycle.svg
#   make plugin          managed plugin underlay:latest (PLUGIN=name:tag)

# `sudo` drops /usr/local/go/bin from PATH on Debian: find go there too.
GO      ?= $(shell command -v go 2>/dev/null || echo /usr/local/go/bin/go)
PLUGIN  ?= underlay:latest
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.version=$(VERSION)
BIN     := bin/underlay
# Bounded fuzzing per target in `make test`; raise it for a longer hunt. A
# count, not a duration: Go 1.26's fuzz coordinator can fail a target with
# "context deadline exceeded" when a duration runs out (golang/go#75804).
FUZZTIME ?= 100000x

export CGO_ENABLED ?= 0

.PHONY: all build run test test-deps test-go test-vm test-vm-docker test-e2e fuzz bench plugin clean

all: build

build: $(BIN)

$(BIN): $(shell find . -name '*.go' -not -path './test/*') go.mod go.sum
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $@ ./cmd/underlay

# The daemon with its defaults: socket /run/docker/plugins/underlay.sock,
# state /var/lib/underlay/underlay.db.
run: build
	./$(BIN) serve

test: test-deps test-go test-vm test-vm-docker test-e2e fuzz
	@echo "make test: all suites passed"

# Installs the Debian packages the suites need when run as root.
test-deps:
	@test/deps.sh

# Unit tests and the host integration suite (the real binary in network
# namespaces with veth parents), all under the race detector.
test-go:
	$(GO) vet ./...
	$(GO) vet -tags vm,e2e,crashpoints,vmdocker,bench ./...
	CGO_ENABLED=1 $(GO) test -race -count=1 -timeout 30m ./...

# ipvlan, 802.1Q and dummy parents in a QEMU VM with Debian's cloud kernel.
# Outside root it skips with the reason, except in CI, where it fails.
test-vm: bin/vm/underlay bin/vm/integration.test
	@if [ "$$(id -u)" != 0 ] && [ -z "$$CI" ]; then \
		echo "test-vm: skipped: the VM suite needs root (installs qemu-system-x86, fetches the kernel, creates namespaces): run sudo make test"; \
	else \
		UNDERLAY_BIN=bin/vm/underlay test/vm/run.sh bin/vm/integration.test -test.v -test.timeout 25m; \
	fi

bin/vm/underlay: FORCE
	$(GO) build -tags crashpoints -o $@ ./cmd/underlay

bin/vm/integration.test: FORCE
	$(GO) test -c -tags vm -o $@ ./test/integration/

# Docker in the VM: the host's dockerd 20.10 (docker.io) bundled into the
# VM, underlay as its legacy plugin, ipvlan DHCP containers (test/vmdocker).
# Root, or CI, as test-vm.
test-vm-docker: bin/vm/underlay bin/vm/vmdocker.test
	@if [ "$$(id -u)" != 0 ] && [ -z "$$CI" ]; then \
		echo "test-vm-docker: skipped: the VM's Docker suite needs root (as test-vm): run sudo make test"; \
	else \
		VM_DOCKER=1 VM_MEM=2048 VM_TIMEOUT=900 UNDERLAY_BIN=bin/vm/underlay test/vm/run.sh bin/vm/vmdocker.test -test.v -test.timeout 12m; \
	fi

bin/vm/vmdocker.test: FORCE
	$(GO) vet -tags vmdocker ./test/vmdocker/
	$(GO) test -c -tags vmdocker -o $@ ./test/vmdocker/

# Docker end to end: a dockerd of the suite's own, the managed plugin, swarm.
test-e2e: build
	$(GO) test -tags e2e -count=1 -timeout 45m -v ./test/e2e/

fuzz:
	GO=$(GO) test/fuzz.sh $(FUZZTIME)

# Benchmarks (not tests): driver vs floor, scale, Docker built-in vs
# underlay. Prints one table, writes the chart. BENCH=driver,scale,docker,ipam picks sections.
bench: build
	UNDERLAY_BIN=$(CURDIR)/$(BIN) CGO_ENABLED=1 $(GO) test -tags bench -count=1 -run '^TestBench$$' -v -timeout 60m ./test/bench/

# Builds the managed plugin's rootfs without docker build and creates
# $(PLUGIN) on the engine DOCKER_HOST points at.
plugin: build
	plugin/build.sh $(BIN) $(PLUGIN)

clean:
	rm -rf bin plugin/build

.PHONY: FORCE
FORCE:
