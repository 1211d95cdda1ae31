package admin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"testing"

	mcpruntime "github.com/agenthost/mcpruntime"
)

// TestListThreadsPaged: GET /admin/v1/threads answers pages of ?limit=
// (default 100, at most 1000) threads with a nextCursor; following it
// lists every thread once; a bad limit or cursor is 400.
func TestListThreadsPaged(t *testing.T) {
	const n = mcpruntime.MaxPageSize + 30
	e := newEnv(t, envOptions{maxThreads: n})
	for i := range n {
		if _, err := e.rt.CreateThread(context.Background(), fmt.Sprintf("t%05d", i), mcpruntime.ThreadOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	type page struct {
		Threads []struct {
			ID string `json:"id"`
		} `json:"threads"`
		NextCursor *string `json:"nextCursor"`
	}
	list := func(query string) (page, *response) {
		t.Helper()
		r := e.do(get("/admin/v1/threads" + query))
		if r.status != http.StatusOK {
			t.Fatalf("%s, want 200", r)
		}
		var p page
		if err := json.Unmarshal(r.body, &p); err != nil {
			t.Fatalf("%s: %v", r, err)
		}
		return p, r
	}
	walk := func(limit string) (pages []int) {
		t.Helper()
		next, seen := 0, 0
		query := "?limit=" + limit
		if limit == "" {
			query = ""
		}
		for {
			p, r := list(query)
			for _, th := range p.Threads {
				if want := fmt.Sprintf("t%05d", next); th.ID != want {
					t.Fatalf("%s: thread %s, want %s", r.path, th.ID, want)
				}
				next++
			}
			seen += len(p.Threads)
			pages = append(pages, len(p.Threads))
			if p.NextCursor == nil {
				break
			}
			if *p.NextCursor == "" {
				t.Fatalf("%s: empty nextCursor", r.path)
			}
			sep := "?"
			if limit != "" {
				sep = "?limit=" + limit + "&"
			}
			query = sep + "cursor=" + url.QueryEscape(*p.NextCursor)
		}
		if seen != n {
			t.Fatalf("limit %q: listed %d threads, want %d", limit, seen, n)
		}
		return pages
	}
	if got := walk(""); len(got) != 11 || got[0] != mcpruntime.DefaultPageSize || got[10] != 30 {
		t.Errorf("default limit: pages of %v, want ten of %d and one of 30", got, mcpruntime.DefaultPageSize)
	}
	if got := walk("400"); fmt.Sprint(got) != "[400 400 230]" {
		t.Errorf("limit 400: pages of %v", got)
	}
	if got := walk("5000"); fmt.Sprint(got) != fmt.Sprint([]int{mcpruntime.MaxPageSize, 30}) {
		t.Errorf("limit over the max: pages of %v, want the max and the rest", got)
	}
	// One page of the most threads is bounded: 1000 summaries.
	if _, r := list("?limit=1000"); len(r.body) > 200<<10 {
		t.Errorf("a page of 1000 threads is %d bytes", len(r.body))
	}
	e.walk([]step{
		{name: "limit 0", request: get("/admin/v1/threads?limit=0"), wantStatus: http.StatusBadRequest, wantCode: "invalid_request"},
		{name: "negative limit", request: get("/admin/v1/threads?limit=-3"), wantStatus: http.StatusBadRequest, wantCode: "invalid_request"},
		{name: "limit not a number", request: get("/admin/v1/threads?limit=ten"), wantStatus: http.StatusBadRequest, wantCode: "invalid_request"},
		{name: "empty cursor", request: get("/admin/v1/threads?cursor="), wantStatus: http.StatusBadRequest, wantCode: "invalid_request"},
		{name: "made-up cursor", request: get("/admin/v1/threads?cursor=abc"), wantStatus: http.StatusBadRequest, wantCode: "invalid_argument"},
	})
}

// TestTooManyThreads: POST /admin/v1/threads past the cap is 409
// too_many_threads; a delete makes room.
func TestTooManyThreads(t *testing.T) {
	e := newEnv(t, envOptions{maxThreads: 2})
	e.walk([]step{
		{name: "first", request: post("/admin/v1/threads", `{"id":"t1"}`), wantStatus: http.StatusCreated},
		{name: "second", request: post("/admin/v1/threads", `{"id":"t2"}`), wantStatus: http.StatusCreated},
		{name: "past the cap", request: post("/admin/v1/threads", `{"id":"t3"}`), wantStatus: http.StatusConflict, wantCode: "too_many_threads"},
		{name: "delete one", request: del("/admin/v1/threads/t1"), wantStatus: http.StatusOK},
		{name: "room again", request: post("/admin/v1/threads", `{"id":"t3"}`), wantStatus: http.StatusCreated},
	})
}
