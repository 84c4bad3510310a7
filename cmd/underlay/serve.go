package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/docker/go-connections/sockets"
	"github.com/underlay-net/underlay/control"
	"github.com/underlay-net/underlay/dhcp"
	"github.com/underlay-net/underlay/dhcp6"
	"github.com/underlay-net/underlay/dockerapi"
	"github.com/underlay-net/underlay/driver"
	"github.com/underlay-net/underlay/internal/pluginapi"
	"github.com/underlay-net/underlay/ipam"
	"github.com/underlay-net/underlay/lancheck"
	"github.com/underlay-net/underlay/metrics"
	"github.com/underlay-net/underlay/netlinkutil"
	nlkernel "github.com/underlay-net/underlay/netlinkutil/kernel"
	"github.com/underlay-net/underlay/probe"
	"github.com/underlay-net/underlay/store"
	"github.com/vishvananda/netns"
)

// serve runs the daemon until SIGTERM or SIGINT: lock the socket path,
// open the state, reconcile it with the kernel, then (and only then) serve
// the socket. On a signal it finishes in-flight requests, closes the state
// file and removes the socket; the lock goes with the process.
func serve(c serveConfig, stderr io.Writer) error {
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.LogLevel)); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	if c.Bases == nil {
		c.Bases = ipam.DefaultBases()
	}
	log.Info("starting underlay", "version", versionString(), "socket", c.Socket, "state", c.State,
		"scope", c.Scope, "docker_host", c.DockerHost, "address_pools", fmt.Sprint(c.Bases), "pool_reservation", c.Reservation,
		"metrics_listen", c.MetricsListen, "profile", c.Profile)

	if c.Profile != "" {
		stopProfiles, err := startProfiles(c.Profile)
		if err != nil {
			return err
		}
		defer func() {
			if err := stopProfiles(); err != nil {
				log.Error("write profiles", "dir", c.Profile, "error", err)
			} else {
				log.Info("profiles written", "dir", c.Profile)
			}
		}()
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	// A second daemon on this socket is refused before anything is
	// reconciled: reconcile only ever touches this state file's links, but
	// a second daemon has no business changing anything. The lock, held
	// until the process ends, settles two daemons started at once; the
	// check then refuses any other process answering on the path.
	socketLock, err := lockSocket(c.Socket, log)
	if err != nil {
		return err
	}
	defer socketLock.Close() // after the socket is removed and the state closed
	if err := checkSocketFree(c.Socket); err != nil {
		return err
	}
	// The metrics address is taken before anything is touched, so a wrong
	// one fails the start at once; it is served with the socket.
	var metricsL net.Listener
	if c.MetricsListen != "" {
		l, err := net.Listen("tcp", c.MetricsListen)
		if err != nil {
			return fmt.Errorf("--metrics-listen: %w", err)
		}
		defer l.Close()
		metricsL = l
	}
	m := metrics.New(metrics.Options{Version: versionString(), Runtime: true, Logger: log})
	db, err := store.Open(c.State, store.Options{ObserveCommit: m.ObserveCommit})
	if err != nil {
		return err
	}
	if err := db.CompactError(); err != nil {
		log.Warn("state file migrated but not compacted: it is complete, only bigger, and the next start tries again", "state", c.State, "error", err)
	}
	defer func() {
		if err := db.Close(); err != nil {
			log.Error("close state file", "error", err)
		}
	}()
	if err := m.WatchState(db); err != nil {
		return err
	}
	kernel := netlinkutil.New()
	defer func() { // after the driver: its last link deletions finish
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := kernel.Close(ctx); err != nil {
			log.Error("stopping without waiting longer for the kernel", "error", err)
		}
	}()
	// Requests read the host's links, addresses and routes from what the
	// kernel's events keep current, not from dumps that grow with the host.
	if err := kernel.Keep(ctx, netlinkutil.KeepOptions{Log: log}); err != nil {
		log.Warn("cannot follow the host's links, addresses and routes: every request reads them from the kernel, at a cost that grows with the host", "error", err)
	}
	docker, err := dockerapi.New(c.DockerHost, 2*time.Second)
	if err != nil {
		return err
	}
	// The IPAM probes the addresses it hands out on LAN pools; the memo
	// spares the driver's CreateEndpoint a second probe of the same one.
	prober := probe.New()
	probed := probe.NewMemo(0, nil)
	// One client per family: the IPAM leases the addresses of DHCP pools
	// with it, the driver renews them (and its own networks' leases).
	dhcpClient, dhcp6Client := dhcp.New(dhcp.WithLogger(log)), dhcp6.New(dhcp6.WithLogger(log))
	d, err := driver.New(driver.Config{
		Store: db, Links: kernel, Routes: kernel, Docker: docker, Scope: c.Scope, Instance: db.InstanceID(),
		DHCP: dhcpClient, DHCPv6: dhcp6Client, Prober: probed.Wrap(prober),
		BootID: bootID(), ContainerRepairWait: c.ContainerRepairWait, SandboxDir: c.SandboxDir,
		Logger: log, CrashPoint: crashHook(log), Events: m,
		// The LAN preflight after each create: in the daemon's namespace,
		// its throwaway links marked as the driver's.
		LANCheck: func(ctx context.Context, n lancheck.Network) []lancheck.Item {
			return lancheck.Run(ctx, lancheck.Env{Kernel: kernel, Netns: netns.None(), Mark: nlkernel.Mark(db.InstanceID()), Log: log}, n)
		},
	})
	if err != nil {
		return err
	}
	defer d.Close()
	if err := m.WatchLAN(d); err != nil {
		return err
	}
	start := time.Now()
	if err := d.Restore(ctx); err != nil {
		return err
	}
	log.Info("state restored and reconciled with the kernel", "duration", time.Since(start), "mark", db.InstanceID())
	d.RunJanitor(5 * time.Second)
	if err := d.RunLeases(ctx); err != nil {
		return fmt.Errorf("load DHCP leases to renew: %w", err)
	}
	if err := d.Watch(ctx); err != nil {
		log.Error("cannot watch link events: links underlay owns are repaired only at the next start", "error", err)
	}

	l, err := listen(c.Socket)
	if err != nil {
		return err
	}
	defer os.Remove(c.Socket)
	im, err := ipam.New(ipam.Config{
		Store: db, Host: kernel, Bases: c.Bases, Reservation: c.Reservation, Logger: log, Events: m,
		Nameservers: func() []netip.Addr { return ipam.ReadNameservers(c.ResolvConf) },
		Known:       startDockerSubnets(ctx, docker.Networks, log),
		Prober:      prober, ProbeMemo: probed, DHCP: dhcpClient, DHCP6: dhcp6Client,
	})
	if err != nil {
		return err
	}
	if err := im.SweepNames(ctx); err != nil {
		log.Warn("could not forget the endpoint names unused too long; they stay until their subnet is used again", "error", err)
	}
	mux := pluginapi.NewMux("NetworkDriver", "IpamDriver")
	d.Register(mux)
	im.Register(mux)
	m.Register(mux)
	(&control.Server{Driver: d, IPAM: im, Docker: docker, Version: versionString(), Log: log}).Register(mux)
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	guard := newRequestGuard(pluginapi.Observe(mux, m), bodyTimeout)
	guard.install(srv)
	errc := make(chan error, 2)
	go func() { errc <- fmt.Errorf("serve %s: %w", c.Socket, srv.Serve(l)) }()
	log.Info("serving the Docker network plugin API", "socket", c.Socket)
	var metricsSrv *metrics.TCPServer
	if metricsL != nil {
		lim := metrics.DefaultTCPLimits()
		if metricsSrv, err = m.NewTCPServer(metricsL, lim, log); err != nil {
			return err
		}
		go func() {
			if err := metricsSrv.Serve(); err != nil {
				errc <- fmt.Errorf("serve metrics on %s: %w", metricsSrv.Addr(), err)
			}
		}()
		log.Info("serving metrics over TCP", "address", metricsSrv.Addr().String(), "path", metrics.Path,
			"max_connections", lim.MaxConns, "idle_timeout", lim.IdleTimeout)
	}

	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Info("signal received: finishing in-flight requests")
	// Bodies and first headers still arriving get a moment more, then
	// fail: shutdown waits for requests being answered, not for clients
	// that stopped sending.
	guard.Stop(shutdownGrace)
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	metricsDone := make(chan struct{})
	go func() { // beside the socket's: a slow scraper does not hold the plugin up
		defer close(metricsDone)
		if metricsSrv == nil {
			return
		}
		ctx, cancel := context.WithTimeout(shutdownCtx, shutdownGrace)
		defer cancel()
		if err := metricsSrv.Shutdown(ctx); err != nil {
			log.Warn("metrics scrapes still running at shutdown: closed", "error", err)
			_ = metricsSrv.Close()
		}
	}()
	defer func() { <-metricsDone }()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		log.Error("requests still running at shutdown", "error", err)
	}
	log.Info("stopped")
	return nil
}

// bodyTimeout is how long a request body on the plugin socket may take
// after its headers; Docker sends both at once.
const bodyTimeout = 10 * time.Second

// shutdownGrace is what a request still arriving at SIGTERM gets to
// finish arriving.
const shutdownGrace = time.Second

// checkSocketFree refuses a socket path another process answers on, or
// that is not a socket. A socket file left by a dead process is fine.
func checkSocketFree(path string) error {
	if conn, err := net.DialTimeout("unix", path, time.Second); err == nil {
		conn.Close()
		return fmt.Errorf("socket %s is in use by another process: stop it, or pass another --socket", path)
	} else if fi, statErr := os.Lstat(path); statErr == nil && fi.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("%s exists and is not a socket: remove it or pass another --socket", path)
	} else if !errors.Is(statErr, os.ErrNotExist) && statErr != nil {
		return statErr
	}
	return nil
}

// listen creates the socket with mode 0660: readable and writable by root
// and the socket's group (root's), as Docker's own plugin sockets. A socket
// file left by a dead process is replaced; one that answers is not.
func listen(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("create socket directory: %w", err)
	}
	if err := checkSocketFree(path); err != nil {
		return nil, err
	}
	l, err := sockets.NewUnixSocketWithOpts(path, sockets.WithChmod(0o660))
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	return l, nil
}

// bootID identifies this boot of the host; "" when the kernel does not say.
func bootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
