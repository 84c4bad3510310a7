package driver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"reflect"
	"runtime/debug"
	"time"

	"github.com/docker/go-plugins-helpers/network"
	"github.com/docker/go-plugins-helpers/sdk"
)

// MaxBody is the largest request body accepted; libnetwork's requests are
// a few kilobytes.
const MaxBody = 1 << 20

// Handler returns the HTTP handler of the remote driver protocol:
// /Plugin.Activate and every /NetworkDriver.* route, with the request and
// response types of go-plugins-helpers. Errors are answered as
// {"Err": "..."} with a non-200 status (errorStatus); malformed requests
// with 400.
func (d *Driver) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/Plugin.Activate", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string][]string{"Implements": {"NetworkDriver"}})
	})
	route(d, mux, "GetCapabilities", func(ctx context.Context, _ *struct{}) (any, error) {
		return d.GetCapabilities(ctx), nil
	})
	route(d, mux, "CreateNetwork", func(ctx context.Context, r *network.CreateNetworkRequest) (any, error) {
		return nil, d.CreateNetwork(ctx, r)
	})
	route(d, mux, "AllocateNetwork", func(ctx context.Context, r *network.AllocateNetworkRequest) (any, error) {
		return d.AllocateNetwork(ctx, r)
	})
	route(d, mux, "DeleteNetwork", func(ctx context.Context, r *network.DeleteNetworkRequest) (any, error) {
		return nil, d.DeleteNetwork(ctx, r)
	})
	route(d, mux, "FreeNetwork", func(ctx context.Context, r *network.FreeNetworkRequest) (any, error) {
		return nil, d.FreeNetwork(ctx, r)
	})
	route(d, mux, "CreateEndpoint", func(ctx context.Context, r *network.CreateEndpointRequest) (any, error) {
		return d.CreateEndpoint(ctx, r)
	})
	route(d, mux, "DeleteEndpoint", func(ctx context.Context, r *network.DeleteEndpointRequest) (any, error) {
		return nil, d.DeleteEndpoint(ctx, r)
	})
	route(d, mux, "EndpointOperInfo", func(ctx context.Context, r *network.InfoRequest) (any, error) {
		return d.EndpointInfo(ctx, r)
	})
	route(d, mux, "Join", func(ctx context.Context, r *network.JoinRequest) (any, error) {
		return d.Join(ctx, r)
	})
	route(d, mux, "Leave", func(ctx context.Context, r *network.LeaveRequest) (any, error) {
		return nil, d.Leave(ctx, r)
	})
	for _, name := range []string{"DiscoverNew", "DiscoverDelete"} {
		route(d, mux, name, func(context.Context, *network.DiscoveryNotification) (any, error) { return nil, nil })
	}
	route(d, mux, "ProgramExternalConnectivity", func(_ context.Context, r *network.ProgramExternalConnectivityRequest) (any, error) {
		return nil, requireIDs(r.NetworkID, r.EndpointID)
	})
	route(d, mux, "RevokeExternalConnectivity", func(_ context.Context, r *network.RevokeExternalConnectivityRequest) (any, error) {
		return nil, requireIDs(r.NetworkID, r.EndpointID)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, network.NewErrorResponse(fmt.Sprintf("underlay does not implement %s", r.URL.Path)))
	})
	return mux
}

func requireIDs(netID, epID string) error {
	if netID == "" || epID == "" {
		return invalidf("request without NetworkID or EndpointID")
	}
	return nil
}

// route registers /NetworkDriver.<name>: it decodes the body into Req
// (an empty body is an empty request), calls fn with the request's context
// and encodes the answer ({} when fn answers nil).
func route[Req any](d *Driver, mux *http.ServeMux, name string, fn func(context.Context, *Req) (any, error)) {
	mux.HandleFunc("/NetworkDriver."+name, func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		req := new(Req)
		defer func() {
			if p := recover(); p != nil {
				d.log.Error("request handler panicked; answered with an error", "route", name, "panic", p, "stack", string(debug.Stack()))
				writeJSON(w, http.StatusInternalServerError, network.NewErrorResponse(fmt.Sprintf("underlay: internal error in %s: %v (please report this)", name, p)))
			}
		}()
		if err := decode(r, req); err != nil {
			d.log.Warn("rejected malformed request", "route", name, "error", err)
			status := http.StatusBadRequest
			var tooBig *http.MaxBytesError
			if errors.As(err, &tooBig) {
				status = http.StatusRequestEntityTooLarge
			}
			writeJSON(w, status, network.NewErrorResponse(fmt.Sprintf("%s: %v", name, err)))
			return
		}
		resp, err := fn(r.Context(), req)
		attrs := append([]any{"route", name, "duration", time.Since(start)}, requestIDs(req)...)
		if err != nil {
			level := slog.LevelError
			if errors.Is(err, ErrInvalid) || errors.Is(err, ErrConflict) || errors.Is(err, ErrNotFound) {
				level = slog.LevelWarn
			}
			d.log.Log(r.Context(), level, "request failed", append(attrs, "error", err)...)
			writeJSON(w, errorStatus(err), network.NewErrorResponse(err.Error()))
			return
		}
		d.log.Debug("request served", attrs...)
		if resp == nil {
			resp = struct{}{}
		}
		writeJSON(w, http.StatusOK, resp)
	})
}

// errorStatus is the HTTP status of a failed request: 400 for a request
// whose content is wrong, 409 for a conflict with networks underlay holds,
// 500 for everything else (including unknown networks and endpoints: a 404
// would tell Docker the call is not implemented). Docker shows the message
// whatever the status.
func errorStatus(err error) int {
	switch {
	case errors.Is(err, ErrInvalid):
		return http.StatusBadRequest
	case errors.Is(err, ErrConflict):
		return http.StatusConflict
	}
	return http.StatusInternalServerError
}

// decode reads at most MaxBody bytes of JSON into req.
func decode(r *http.Request, req any) error {
	body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, MaxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return fmt.Errorf("request body is larger than %d bytes: %w", MaxBody, err)
		}
		return fmt.Errorf("read request body: %w", err)
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	if err := json.Unmarshal(body, req); err != nil {
		return fmt.Errorf("request body is not a valid JSON request: %w", err)
	}
	return nil
}

// requestIDs returns log attributes for the IDs a request carries.
func requestIDs(req any) []any {
	v := reflect.ValueOf(req).Elem()
	var out []any
	for _, f := range [...]struct{ field, attr string }{{"NetworkID", "network"}, {"EndpointID", "endpoint"}} {
		if fv := v.FieldByName(f.field); fv.IsValid() && fv.Kind() == reflect.String && fv.String() != "" {
			out = append(out, f.attr, fv.String())
		}
	}
	return out
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", sdk.DefaultContentTypeV1_1)
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
