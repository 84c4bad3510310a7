package pluginapi

import (
	"context"
	"net/http"
	"time"
)

// Observer is told about every request a Route answers: its route (the
// path without the leading slash, e.g. "NetworkDriver.CreateNetwork"), its
// outcome (Outcome) and how long it took. It must be safe for concurrent
// use. The metrics package implements it.
type Observer interface {
	ObserveRequest(route, outcome string, d time.Duration)
}

// The outcomes of a request (Outcome).
const (
	OutcomeOK       = "ok"
	OutcomeInvalid  = "invalid"
	OutcomeConflict = "conflict"
	OutcomeError    = "error"
)

// Outcome names a route's answer by its status: ok (200), invalid (400, and
// 413 for a body over MaxBody: both are requests whose content is wrong),
// conflict (409) and error (500 and anything else).
func Outcome(status int) string {
	switch status {
	case http.StatusOK:
		return OutcomeOK
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
		return OutcomeInvalid
	case http.StatusConflict:
		return OutcomeConflict
	}
	return OutcomeError
}

type observerKey struct{}

// Observe returns h with o installed for every request: each Route that
// answers one reports it to o. The mux of the plugin socket is wrapped once
// (serve), so every route of both drivers is observed, and only those
// (/Plugin.Activate, unknown paths and anything else on the mux are not).
// A nil o returns h.
func Observe(h http.Handler, o Observer) http.Handler {
	if o == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), observerKey{}, o)))
	})
}

// noObserver is the observer of a request no Observe wrapped.
type noObserver struct{}

func (noObserver) ObserveRequest(string, string, time.Duration) {}

func observerFrom(ctx context.Context) Observer {
	if o, ok := ctx.Value(observerKey{}).(Observer); ok {
		return o
	}
	return noObserver{}
}
