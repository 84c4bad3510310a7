package dockerapi

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestNetworkExistsBelievesOnlyDockersNotFound(t *testing.T) {
	for _, tc := range []struct {
		name    string
		handler http.HandlerFunc
		exists  bool
		err     string
	}{
		{"Docker knows it", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Api-Version", "1.41")
			fmt.Fprint(w, `{"Id":"x"}`)
		}, true, ""},
		{"Docker's 404", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Api-Version", "1.41")
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `{"message":"network x not found"}`)
		}, false, ""},
		{"a web server's 404", http.NotFound, false, "not Docker's"},
		{"a proxy's JSON 404 without Api-Version", func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `{"message":"no route"}`)
		}, false, "not Docker's"},
		{"Api-Version but no Docker body", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Api-Version", "1.41")
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `404 page not found`)
		}, false, "not Docker's"},
		{"a server error", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Api-Version", "1.41")
			http.Error(w, `{"message":"boom"}`, http.StatusInternalServerError)
		}, false, "status 500"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(tc.handler)
			defer srv.Close()
			api, err := New("tcp://"+strings.TrimPrefix(srv.URL, "http://"), time.Second)
			if err != nil {
				t.Fatal(err)
			}
			exists, err := api.NetworkExists(context.Background(), "x")
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("error %v, want an answer", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("answered %v, %v; want an error mentioning %q", exists, err, tc.err)
			case exists != tc.exists:
				t.Fatalf("exists = %v, want %v", exists, tc.exists)
			}
		})
	}
}
