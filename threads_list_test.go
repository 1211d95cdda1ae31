package mcpruntime_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	mcpruntime "github.com/agenthost/mcpruntime"
	"github.com/agenthost/mcpruntime/admin"
)

// post sends one MCP POST and returns the status, the session id it
// answered and the body.
func mcpPost(tb testing.TB, url, tok, sid, body string) (int, string, []byte) {
	tb.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Content-Type", "application/json")
	if sid != "" {
		req.Header.Set("Mcp-Session-Id", sid)
		req.Header.Set("MCP-Protocol-Version", "2025-11-25")
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		tb.Fatal(err)
	}
	return res.StatusCode, res.Header.Get("Mcp-Session-Id"), b
}

// adminGet sends one admin GET and returns the status and the body.
func adminGet(tb testing.TB, url, tok string) (int, []byte) {
	tb.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		tb.Fatal(err)
	}
	return res.StatusCode, b
}

// listingEnv is a runtime with n threads, its MCP endpoint and its admin
// API, and a read-only client token with an MCP session.
type listingEnv struct {
	rt                 *mcpruntime.Runtime
	mcpURL, adminURL   string
	clientTok, session string
}

const listingAdminToken = "listing-admin-token-0123456789abcdef"

func newListingEnv(tb testing.TB, n int) *listingEnv {
	tb.Helper()
	ctx := context.Background()
	rt, err := mcpruntime.New(mcpruntime.Config{Logger: slog.New(slog.DiscardHandler), MaxThreads: max(n, mcpruntime.DefaultMaxThreads)})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = rt.Close() })
	for i := range n {
		if _, err := rt.CreateThread(ctx, fmt.Sprintf("thread-%06d", i), mcpruntime.ThreadOptions{}); err != nil {
			tb.Fatalf("CreateThread %d: %v", i, err)
		}
	}
	srv, err := rt.MCPHandler(mcpruntime.MCPOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	mcpS := httptest.NewServer(srv)
	adminS := httptest.NewServer(admin.New(rt, admin.Options{Token: listingAdminToken, Logger: slog.New(slog.DiscardHandler)}))
	tb.Cleanup(func() {
		srv.Close()
		mcpS.Close()
		adminS.Close()
	})
	cl, err := rt.IssueClient(ctx, "reader", "read-only")
	if err != nil {
		tb.Fatal(err)
	}
	e := &listingEnv{rt: rt, mcpURL: mcpS.URL + "/mcp", adminURL: adminS.URL, clientTok: cl.Token}
	status, sid, body := mcpPost(tb, e.mcpURL, cl.Token, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"listing","version":"1"}}}`)
	if status != 200 || sid == "" {
		tb.Fatalf("initialize: %d %s", status, body)
	}
	e.session = sid
	return e
}

// threadList calls thread_list with args and returns the HTTP body.
func (e *listingEnv) threadList(tb testing.TB, args string) []byte {
	tb.Helper()
	status, _, body := mcpPost(tb, e.mcpURL, e.clientTok, e.session,
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"thread_list","arguments":`+args+`}}`)
	if status != 200 {
		tb.Fatalf("thread_list: %d %s", status, body)
	}
	return body
}

// BenchmarkListings100k measures, with 100 000 threads (the cap raised),
// the bytes of one thread_list answer (to a read-only client, over HTTP)
// and of one GET /admin/v1/threads: one page each, bounded whatever the
// number of threads (unpaged, the whole list would be 10 200 139 and
// 10 888 924 bytes).
func BenchmarkListings100k(b *testing.B) {
	e := newListingEnv(b, 100_000)
	var toolBytes, adminBytes int
	for b.Loop() {
		toolBytes = len(e.threadList(b, `{}`))
		status, body := adminGet(b, e.adminURL+"/admin/v1/threads", listingAdminToken)
		if status != 200 {
			b.Fatalf("GET threads: %d", status)
		}
		adminBytes = len(body)
	}
	b.ReportMetric(float64(toolBytes), "thread_list-bytes")
	b.ReportMetric(float64(adminBytes), "admin-threads-bytes")
}

// threadListPage is the structured content of a thread_list answer.
type threadListPage struct {
	Threads []struct {
		ThreadID string `json:"threadId"`
		Status   string `json:"status"`
	} `json:"threads"`
	NextCursor string `json:"nextCursor"`
	Code       string `json:"code"` // of a refusal
}

// decodeToolPage decodes an MCP tools/call answer of thread_list.
func decodeToolPage(t *testing.T, body []byte) (page threadListPage, isError bool) {
	t.Helper()
	var a struct {
		Result struct {
			IsError           bool            `json:"isError"`
			StructuredContent json.RawMessage `json:"structuredContent"`
		} `json:"result"`
	}
	if err := json.Unmarshal(body, &a); err != nil {
		t.Fatalf("answer %s: %v", body, err)
	}
	if err := json.Unmarshal(a.Result.StructuredContent, &page); err != nil {
		t.Fatalf("structured content %s: %v", a.Result.StructuredContent, err)
	}
	return page, a.Result.IsError
}

// TestThreadListPaged: thread_list answers at most DefaultPageSize threads
// with a nextCursor; following it lists every thread once, in order, in
// answers bounded in bytes whatever the number of threads; a cursor no
// listing returned is an invalid_arguments refusal.
func TestThreadListPaged(t *testing.T) {
	const n = 2*mcpruntime.DefaultPageSize + 17
	e := newListingEnv(t, n)
	var seen []string
	cursor, pages := "", 0
	for {
		args := `{}`
		if cursor != "" {
			args = `{"cursor":"` + cursor + `"}`
		}
		body := e.threadList(t, args)
		page, isError := decodeToolPage(t, body)
		if isError {
			t.Fatalf("page %d: refused: %s", pages, body)
		}
		pages++
		if len(page.Threads) > mcpruntime.DefaultPageSize {
			t.Fatalf("page %d holds %d threads, more than %d", pages, len(page.Threads), mcpruntime.DefaultPageSize)
		}
		// A page of 100 summaries, twice (text and structured content),
		// stays far below 64 KiB; 100 000 threads on one page were 10 MB.
		if len(body) > 64<<10 {
			t.Fatalf("page %d is %d bytes", pages, len(body))
		}
		for _, th := range page.Threads {
			seen = append(seen, th.ThreadID)
		}
		if page.NextCursor == "" {
			break
		}
		if len(page.Threads) != mcpruntime.DefaultPageSize {
			t.Fatalf("page %d holds %d threads and a nextCursor, want a full page", pages, len(page.Threads))
		}
		cursor = page.NextCursor
	}
	want := make([]string, n)
	for i := range want {
		want[i] = fmt.Sprintf("thread-%06d", i)
	}
	if diff := cmp.Diff(want, seen); diff != "" || pages != 3 {
		t.Errorf("%d pages; threads listed (-want +got):\n%s", pages, diff)
	}

	for _, bad := range []string{`"nope"`, `"c1.!!!"`, `"c1.Li4"` /* ".." */, `"c2.dGhyZWFk"`} {
		page, isError := decodeToolPage(t, e.threadList(t, `{"cursor":`+bad+`}`))
		if !isError || page.Code != mcpruntime.CodeInvalidArguments {
			t.Errorf("cursor %s: %+v (isError %v), want an invalid_arguments refusal", bad, page, isError)
		}
	}
}

// TestListThreads: the embedding API's pages, their limits and the cursor
// past threads deleted meanwhile.
func TestListThreads(t *testing.T) {
	ctx := context.Background()
	e := newListingEnv(t, 12)
	list := func(opts mcpruntime.ListOptions) mcpruntime.ThreadPage {
		t.Helper()
		p, err := e.rt.ListThreads(ctx, opts)
		if err != nil {
			t.Fatalf("ListThreads(%+v) = %v", opts, err)
		}
		return p
	}
	ids := func(p mcpruntime.ThreadPage) []string {
		var out []string
		for _, th := range p.Threads {
			out = append(out, th.ID)
		}
		return out
	}
	p1 := list(mcpruntime.ListOptions{Limit: 5})
	if diff := cmp.Diff([]string{"thread-000000", "thread-000001", "thread-000002", "thread-000003", "thread-000004"}, ids(p1)); diff != "" || p1.NextCursor == "" {
		t.Fatalf("first page (-want +got):\n%s (next %q)", diff, p1.NextCursor)
	}
	// The thread a page ended at, and the next one, go away: the listing
	// goes on after where the page ended.
	noErr(t, e.rt.DeleteThread(ctx, "thread-000004"))
	noErr(t, e.rt.DeleteThread(ctx, "thread-000005"))
	p2 := list(mcpruntime.ListOptions{Limit: 5, Cursor: p1.NextCursor})
	if diff := cmp.Diff([]string{"thread-000006", "thread-000007", "thread-000008", "thread-000009", "thread-000010"}, ids(p2)); diff != "" {
		t.Errorf("second page (-want +got):\n%s", diff)
	}
	p3 := list(mcpruntime.ListOptions{Limit: 5, Cursor: p2.NextCursor})
	if diff := cmp.Diff([]string{"thread-000011"}, ids(p3)); diff != "" || p3.NextCursor != "" {
		t.Errorf("last page (-want +got):\n%s (next %q)", diff, p3.NextCursor)
	}
	if p := list(mcpruntime.ListOptions{}); len(p.Threads) != 10 || p.NextCursor != "" {
		t.Errorf("default page: %d threads, next %q; want all 10 and no cursor", len(p.Threads), p.NextCursor)
	}
	if p := list(mcpruntime.ListOptions{Limit: mcpruntime.MaxPageSize + 1}); len(p.Threads) != 10 {
		t.Errorf("limit over the max: %d threads", len(p.Threads))
	}
	for _, opts := range []mcpruntime.ListOptions{{Limit: -1}, {Cursor: "x"}, {Cursor: "c1."}} {
		if _, err := e.rt.ListThreads(ctx, opts); !errors.Is(err, mcpruntime.ErrInvalidArgument) {
			t.Errorf("ListThreads(%+v) = %v, want ErrInvalidArgument", opts, err)
		}
	}
}

// TestMaxThreads: past Config.MaxThreads, CreateThread fails with
// ErrTooManyThreads — exactly, under concurrent creates; archived threads
// count, a deleted one makes room.
func TestMaxThreads(t *testing.T) {
	ctx := context.Background()
	rt := quietRuntime(t, mcpruntime.Config{MaxThreads: 5})
	var wg sync.WaitGroup
	errs := make([]error, 20)
	for i := range errs {
		wg.Go(func() {
			_, errs[i] = rt.CreateThread(ctx, fmt.Sprintf("t%02d", i), mcpruntime.ThreadOptions{})
		})
	}
	wg.Wait()
	created := 0
	for i, err := range errs {
		switch {
		case err == nil:
			created++
		case !errors.Is(err, mcpruntime.ErrTooManyThreads):
			t.Errorf("create %d: %v, want nil or ErrTooManyThreads", i, err)
		}
	}
	ths, err := rt.Threads(ctx)
	noErr(t, err)
	if created != 5 || len(ths) != 5 {
		t.Fatalf("%d creates succeeded, %d threads exist; want 5 and 5", created, len(ths))
	}
	noErr(t, rt.Archive(ctx, ths[0].ID))
	if _, err := rt.CreateThread(ctx, "x1", mcpruntime.ThreadOptions{}); !errors.Is(err, mcpruntime.ErrTooManyThreads) {
		t.Errorf("create with an archived thread among 5: %v, want ErrTooManyThreads", err)
	}
	noErr(t, rt.DeleteThread(ctx, ths[0].ID))
	if _, err := rt.CreateThread(ctx, "x2", mcpruntime.ThreadOptions{}); err != nil {
		t.Errorf("create after a delete: %v", err)
	}
}
