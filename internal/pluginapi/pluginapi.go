// Package pluginapi is the HTTP side of Docker's plugin protocol that every
// underlay API shares: one mux on one socket answering /Plugin.Activate with
// the interfaces it implements, JSON routes with a size limit, panic
// recovery and structured logs, and the mapping of errors to statuses.
package pluginapi

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
	"strings"
	"time"

	"github.com/docker/go-plugins-helpers/sdk"
)

// MaxBody is the largest request body accepted; Docker's requests are a few
// kilobytes.
const MaxBody = 1 << 20

// The errors that choose a refusal's status (see Status).
var (
	// ErrInvalid is wrapped by every error about a request's content.
	ErrInvalid = errors.New("invalid request")
	// ErrConflict is wrapped by refusals that conflict with what underlay
	// holds.
	ErrConflict = errors.New("conflict")
	// ErrNotFound is wrapped when a request names something underlay does
	// not know.
	ErrNotFound = errors.New("not found")
)

// Invalidf returns an error wrapping ErrInvalid.
func Invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}

// Status is the HTTP status of a failed request: 400 for a request whose
// content is wrong, 409 for a conflict, 500 for everything else (unknown
// IDs included: a 404 would tell Docker the call is not implemented).
// Docker shows the message whatever the status.
func Status(err error) int {
	switch {
	case errors.Is(err, ErrInvalid):
		return http.StatusBadRequest
	case errors.Is(err, ErrConflict):
		return http.StatusConflict
	}
	return http.StatusInternalServerError
}

// ErrorResponse is a refusal's body; Docker shows Err as "remote: ...".
type ErrorResponse struct {
	Err string
}

// NewMux returns a mux answering /Plugin.Activate with implements and
// every unknown route with 404 (Docker's "not implemented").
func NewMux(implements ...string) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/Plugin.Activate", func(w http.ResponseWriter, r *http.Request) {
		WriteJSON(w, http.StatusOK, map[string][]string{"Implements": implements})
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		WriteJSON(w, http.StatusNotFound, ErrorResponse{Err: fmt.Sprintf("underlay does not implement %s", r.URL.Path)})
	})
	return mux
}

// Route registers path: it decodes the body into Req (an empty body is an
// empty request), calls fn with the request's context and encodes the
// answer ({} when fn answers nil). Malformed requests answer 400 (413 when
// too large), failures Status(err); a panic answers 500 and is logged.
//
// Every answer is reported, with its route (path without the leading
// slash), outcome (Outcome) and duration, to the Observer that Observe
// installed in front of the mux, if any.
func Route[Req any](mux *http.ServeMux, log *slog.Logger, path string, fn func(context.Context, *Req) (any, error)) {
	route := strings.TrimPrefix(path, "/")
	mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		req := new(Req)
		status := http.StatusInternalServerError // until answered otherwise
		defer func() {
			if p := recover(); p != nil {
				log.Error("request handler panicked; answered with an error", "route", path, "panic", p, "stack", string(debug.Stack()))
				status = http.StatusInternalServerError
				WriteJSON(w, status, ErrorResponse{Err: fmt.Sprintf("underlay: internal error in %s: %v (please report this)", path, p)})
			}
			observerFrom(r.Context()).ObserveRequest(route, Outcome(status), time.Since(start))
		}()
		if err := decode(r, req); err != nil {
			log.Warn("rejected malformed request", "route", path, "error", err)
			status = http.StatusBadRequest
			var tooBig *http.MaxBytesError
			if errors.As(err, &tooBig) {
				status = http.StatusRequestEntityTooLarge
			}
			WriteJSON(w, status, ErrorResponse{Err: fmt.Sprintf("%s: %v", path[1:], err)})
			return
		}
		resp, err := fn(r.Context(), req)
		attrs := append([]any{"route", path, "duration", time.Since(start)}, requestIDs(req)...)
		if err != nil {
			level := slog.LevelError
			if errors.Is(err, ErrInvalid) || errors.Is(err, ErrConflict) || errors.Is(err, ErrNotFound) {
				level = slog.LevelWarn
			}
			log.Log(r.Context(), level, "request failed", append(attrs, "error", err)...)
			status = Status(err)
			WriteJSON(w, status, ErrorResponse{Err: err.Error()})
			return
		}
		if log.Enabled(r.Context(), slog.LevelDebug) {
			log.Debug("request served", attrs...)
		}
		if resp == nil {
			resp = struct{}{}
		}
		status = http.StatusOK
		WriteJSON(w, status, resp)
	})
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
	if v.Kind() != reflect.Struct {
		return nil
	}
	var out []any
	for _, f := range [...]struct{ field, attr string }{{"NetworkID", "network"}, {"EndpointID", "endpoint"}, {"PoolID", "pool"}} {
		if fv := v.FieldByName(f.field); fv.IsValid() && fv.Kind() == reflect.String && fv.String() != "" {
			out = append(out, f.attr, fv.String())
		}
	}
	return out
}

// WriteJSON answers v with the plugin protocol's content type.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", sdk.DefaultContentTypeV1_1)
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
