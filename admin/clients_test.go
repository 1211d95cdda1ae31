package admin_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"testing"
)

// TestListClients: GET /admin/v1/clients lists every client grant — its
// kind, label, access, created, lastIssued, expiry, live tokens, and no
// token — in pages like the thread listing (?limit, ?cursor, nextCursor,
// the same errors); GET /admin/v1/clients/{id} shows one, 404
// unknown_client for an unknown or revoked id (SPEC §7.2).
func TestListClients(t *testing.T) {
	e := newEnv(t, envOptions{})
	const n = 105
	for i := range n {
		r := e.do(post("/admin/v1/clients", fmt.Sprintf(`{"label":"c%03d","access":"read-only"}`, i)))
		if r.status != http.StatusCreated {
			t.Fatalf("%s", r)
		}
		e.mint(fmt.Sprintf("tok%d", i), field(t, r, "token"))
	}
	e.walk([]step{
		{name: "issue a read-write one", request: post("/admin/v1/clients", `{"label":"rw","access":"read-write"}`),
			wantStatus: http.StatusCreated, check: func(t *testing.T, e *env, r *response) {
				e.vars["cl"] = field(t, r, "clientId")
				e.mint("rw", field(t, r, "token"))
			}},
		{name: "show one", request: get("/admin/v1/clients/{cl}"), wantStatus: http.StatusOK,
			check: func(t *testing.T, e *env, r *response) {
				wantFields(t, r, "id", "kind", "label", "access", "created", "lastIssued", "expires", "liveTokens")
				m := r.json(t)
				if m["id"] != e.vars["cl"] || m["kind"] != "admin" || m["label"] != "rw" || m["access"] != "read-write" || m["liveTokens"] != 1.0 {
					t.Errorf("%s", r)
				}
			}},
		{name: "show unknown", request: get("/admin/v1/clients/cl_nope"), wantStatus: http.StatusNotFound, wantCode: "unknown_client"},
		{name: "limit 0", request: get("/admin/v1/clients?limit=0"), wantStatus: http.StatusBadRequest, wantCode: "invalid_request"},
		{name: "limit not a number", request: get("/admin/v1/clients?limit=ten"), wantStatus: http.StatusBadRequest, wantCode: "invalid_request"},
		{name: "empty cursor", request: get("/admin/v1/clients?cursor="), wantStatus: http.StatusBadRequest, wantCode: "invalid_request"},
		{name: "made-up cursor", request: get("/admin/v1/clients?cursor=abc"), wantStatus: http.StatusBadRequest, wantCode: "invalid_argument"},
	})
	type page struct {
		Clients []struct {
			ID    string `json:"id"`
			Kind  string `json:"kind"`
			Label string `json:"label"`
		} `json:"clients"`
		NextCursor *string `json:"nextCursor"`
	}
	seen := map[string]bool{}
	var sizes []int
	for query := "?limit=40"; ; {
		r := e.do(get("/admin/v1/clients" + query))
		if r.status != http.StatusOK {
			t.Fatalf("%s, want 200", r)
		}
		var p page
		if err := json.Unmarshal(r.body, &p); err != nil {
			t.Fatalf("%s: %v", r, err)
		}
		for _, c := range p.Clients {
			if seen[c.ID] || c.Kind != "admin" || c.Label == "" {
				t.Fatalf("%s: client %+v twice or without kind or label", r.path, c)
			}
			seen[c.ID] = true
		}
		sizes = append(sizes, len(p.Clients))
		if p.NextCursor == nil {
			break
		}
		query = "?limit=40&cursor=" + url.QueryEscape(*p.NextCursor)
	}
	if len(seen) != n+1 || fmt.Sprint(sizes) != "[40 40 26]" {
		t.Errorf("listed %d clients in pages of %v, want %d in [40 40 26]", len(seen), sizes, n+1)
	}
	if r := e.do(get("/admin/v1/clients")); r.status != http.StatusOK || len(r.json(t)["clients"].([]any)) != 100 {
		t.Errorf("default page: %s", r)
	}
	e.walk([]step{
		{name: "revoke", request: del("/admin/v1/clients/{cl}"), wantStatus: http.StatusOK},
		{name: "show revoked", request: get("/admin/v1/clients/{cl}"), wantStatus: http.StatusNotFound, wantCode: "unknown_client"},
	})
	e.checkNoLeaks()
}
