package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sync"
	"testing"
)

// TestAdminCLIClientListFollowsCursor: `client list` follows nextCursor and
// prints every client grant as one answer, {"clients":[…]} (SPEC §7.2).
func TestAdminCLIClientListFollowsCursor(t *testing.T) {
	var (
		mu   sync.Mutex // guards seen
		seen []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.URL.Path+"?"+r.URL.RawQuery)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Query().Get("cursor") {
		case "":
			io.WriteString(w, `{"clients":[{"id":"cl_a","kind":"admin"},{"id":"cl_b","kind":"oauth"}],"nextCursor":"c1.b"}`)
		default:
			io.WriteString(w, `{"clients":[{"id":"cl_c","kind":"jwt"}]}`)
		}
	}))
	defer srv.Close()
	env := map[string]string{"RUNTIME_ADMIN_TOKEN": "admintok", "RUNTIME_ADMIN_URL": srv.URL}
	code, stdout, stderr := runCLI(context.Background(), env, "admin", "client", "list")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var got struct {
		Clients []struct{ ID, Kind string }
	}
	if err := json.Unmarshal([]byte(stdout), &got); err != nil || len(got.Clients) != 3 || got.Clients[2].Kind != "jwt" {
		t.Errorf("printed %s (%v), want clients cl_a, cl_b, cl_c", stdout, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"/admin/v1/clients?", "/admin/v1/clients?cursor=c1.b"}; !reflect.DeepEqual(seen, want) {
		t.Errorf("requests %q, want %q", seen, want)
	}
}
