package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"golang.org/x/net/netutil"
)

// TCPLimits bound what the clients of --metrics-listen can hold of the
// daemon. The port is reachable from the network and unauthenticated; the
// plugin socket shares the process's open files with it, so no number of
// clients may take more than MaxConns descriptors, and none may hold one
// for long without a request.
type TCPLimits struct {
	// MaxConns is the most connections served at once; further ones wait
	// in the kernel's accept queue (they cost the daemon no descriptor)
	// until a served one closes.
	MaxConns int
	// ReadHeaderTimeout closes a connection whose request headers have
	// not arrived in time (one that never sends anything included).
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a whole request.
	ReadTimeout time.Duration
	// WriteTimeout bounds a scrape's answer (a client that does not read).
	WriteTimeout time.Duration
	// IdleTimeout closes a keep-alive connection with no next request.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's headers.
	MaxHeaderBytes int
}

// DefaultTCPLimits are the limits of --metrics-listen: a scrape is one
// small GET answered in milliseconds, and Prometheus scrapes every 15 s or
// more, so a connection idle for 10 s is not worth its descriptor.
func DefaultTCPLimits() TCPLimits {
	return TCPLimits{
		MaxConns:          32,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       10 * time.Second,
		MaxHeaderBytes:    16 << 10,
	}
}

// TCPServer serves /metrics, and nothing else, on a TCP listener within
// TCPLimits.
type TCPServer struct {
	srv *http.Server
	l   net.Listener
}

// NewTCPServer returns the server of l; Serve starts it. Errors of
// connections (timeouts, resets) go to log at DEBUG: a client's mistakes
// are no daemon's warning.
func (m *Metrics) NewTCPServer(l net.Listener, lim TCPLimits, log *slog.Logger) (*TCPServer, error) {
	if lim.MaxConns <= 0 {
		return nil, fmt.Errorf("metrics over TCP: MaxConns %d is not positive", lim.MaxConns)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	mux := http.NewServeMux()
	m.Register(mux)
	return &TCPServer{
		l: netutil.LimitListener(l, lim.MaxConns),
		srv: &http.Server{
			Handler:           mux,
			ReadHeaderTimeout: lim.ReadHeaderTimeout,
			ReadTimeout:       lim.ReadTimeout,
			WriteTimeout:      lim.WriteTimeout,
			IdleTimeout:       lim.IdleTimeout,
			MaxHeaderBytes:    lim.MaxHeaderBytes,
			ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
		},
	}, nil
}

// Addr is the address served.
func (s *TCPServer) Addr() net.Addr { return s.l.Addr() }

// Serve serves until Shutdown; it returns nil after Shutdown.
func (s *TCPServer) Serve() error {
	if err := s.srv.Serve(s.l); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Shutdown stops accepting, closes idle connections and waits for the
// scrapes being answered, until ctx is done.
func (s *TCPServer) Shutdown(ctx context.Context) error { return s.srv.Shutdown(ctx) }

// Close closes the listener and every connection at once.
func (s *TCPServer) Close() error { return s.srv.Close() }
