package transport

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/mcpruntime/memdb"
)

// TestFlights: a credential's change cancels exactly the flights of that
// credential, and only when dead says it died; removing flights in any
// order (head, middle, tail) keeps the rest registered; cancelAll cancels
// every flight with its cause.
func TestFlights(t *testing.T) {
	f := newFlights(time.Now)
	type call struct {
		fl  *flight
		ctx context.Context
	}
	var calls []call
	for i := range 6 {
		ctx, cancel := context.WithCancelCause(context.Background())
		t.Cleanup(func() { cancel(nil) })
		fl := &flight{credential: fmt.Sprintf("cred%d", i%2), cancel: cancel}
		f.add(fl)
		calls = append(calls, call{fl, ctx})
	}
	if n := f.count(); n != 6 {
		t.Fatalf("count = %d, want 6", n)
	}
	// cred0 holds calls 0, 2, 4 (4 the head): drop the middle one.
	f.remove(calls[2].fl)
	f.changed([]*memdb.Credential{{ID: "cred0"}, {ID: "cred1"}}, func(id string) bool { return id == "cred0" })
	for i, c := range calls {
		dead := i%2 == 0 && i != 2
		if got := c.ctx.Err() != nil; got != dead {
			t.Errorf("call %d (%s) cancelled = %v, want %v", i, c.fl.credential, got, dead)
		}
		if dead && context.Cause(c.ctx) != errCredentialDead {
			t.Errorf("call %d: cause %v, want errCredentialDead", i, context.Cause(c.ctx))
		}
	}
	for _, i := range []int{5, 1, 0, 4} { // cred1's head, its tail; cred0's tail, its head
		f.remove(calls[i].fl)
	}
	if n := f.count(); n != 1 {
		t.Fatalf("count after removals = %d, want 1 (call 3)", n)
	}
	f.cancelAll(errClosing)
	if context.Cause(calls[3].ctx) != errClosing {
		t.Fatalf("call 3 after cancelAll: cause %v, want errClosing", context.Cause(calls[3].ctx))
	}
	f.remove(calls[3].fl)
	if n := f.count(); n != 0 {
		t.Fatalf("count at the end = %d, want 0", n)
	}
	for i := range f.shards {
		if len(f.shards[i].heads) != 0 {
			t.Fatalf("shard %d keeps %d heads after every flight went", i, len(f.shards[i].heads))
		}
	}
}

// FuzzModernToolResultEncoding: the hand-written 2026-07-28 tools/call
// response is byte for byte what modernResult and appendRawResponse
// write, for any text, blocks, structured result and isError; a nil
// Content is left to them.
func FuzzModernToolResultEncoding(f *testing.F) {
	f.Add("hello", "", 1, false, `"srv"`)
	f.Add("<&>\u2028\x00\xff", `{"k":[1,"<v>"]}`, 3, true, `"a\"b"`)
	f.Add("", "", 0, false, "7")
	f.Fuzz(func(t *testing.T, text, structured string, blocks int, isError bool, id string) {
		if !json.Valid([]byte(id)) {
			return
		}
		blocks = max(blocks%4, -blocks%4)
		r := &mcp.CallToolResult{Content: []mcp.Content{}, IsError: isError}
		for range blocks {
			r.Content = append(r.Content, &mcp.TextContent{Text: text})
		}
		if structured != "" && json.Valid([]byte(structured)) {
			var v any
			if err := json.Unmarshal([]byte(structured), &v); err != nil {
				t.Fatal(err)
			}
			r.StructuredContent = v
		}
		s := &Server{opts: settings{Options: Options{ServerName: "fuzz <srv>", ServerVersion: "1.0"}}}
		s.serverInfo, _ = json.Marshal(serverInfo{Name: s.opts.ServerName, Version: s.opts.ServerVersion})
		res, err := s.modernResult(r, "complete", cache{})
		if err != nil {
			t.Fatalf("modernResult: %v", err)
		}
		want := appendRawResponse(nil, json.RawMessage(id), res)
		got, ok := appendModernCallResponse(nil, json.RawMessage(id), r, s.serverInfo)
		if !ok || string(got) != string(want) {
			t.Fatalf("appendModernCallResponse = %s (ok %v)\nwant %s", got, ok, want)
		}
		if _, ok := appendModernCallResponse(nil, json.RawMessage(id), &mcp.CallToolResult{}, s.serverInfo); ok {
			t.Fatal("a nil Content was encoded by hand")
		}
	})
}

// TestFlightsExpire: a flight whose credential has an expiry is cancelled
// once the endpoint's clock reaches it, and not before; one removed first
// is not; the shards' heaps stay consistent through adds, removals and
// expiries in any order.
func TestFlightsExpire(t *testing.T) {
	var clock atomic.Int64 // the endpoint's clock, in hours after base
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := func() time.Time { return base.Add(time.Duration(clock.Load()) * time.Hour) }
	f := newFlights(now)
	defer f.stop()
	type call struct {
		fl  *flight
		ctx context.Context
	}
	var calls []call
	for i := range 24 {
		ctx, cancel := context.WithCancelCause(context.Background())
		t.Cleanup(func() { cancel(nil) })
		fl := &flight{credential: fmt.Sprintf("cred%d", i%5), cancel: cancel}
		if i%4 != 0 { // every fourth never expires
			fl.expires = base.Add(time.Duration(1+(i*7)%10) * time.Hour).UnixNano()
		}
		f.add(fl)
		calls = append(calls, call{fl, ctx})
	}
	check := func() {
		t.Helper()
		for i := range f.shards {
			sh := &f.shards[i]
			sh.mu.Lock()
			for j, fl := range sh.due {
				if int(fl.due) != j || j > 0 && fl.expires < sh.due[(j-1)/2].expires {
					t.Errorf("shard %d: heap entry %d knows index %d, or comes before its parent", i, j, fl.due)
				}
			}
			sh.mu.Unlock()
		}
	}
	expireAll := func() {
		for i := range f.shards {
			f.expire(&f.shards[i])
		}
	}
	check()
	removed := map[int]bool{3: true, 10: true, 17: true}
	for i := range removed {
		f.remove(calls[i].fl)
	}
	check()
	for hour := int64(0); hour <= 11; hour++ {
		clock.Store(hour)
		expireAll()
		check()
		for i, c := range calls {
			due := c.fl.expires != 0 && c.fl.expires <= now().UnixNano()
			cancelled := c.ctx.Err() != nil
			switch {
			case removed[i] && cancelled:
				t.Fatalf("hour %d: flight %d was removed, then cancelled", hour, i)
			case !removed[i] && due != cancelled:
				t.Fatalf("hour %d: flight %d (expires %v) cancelled = %v, want %v", hour, i, time.Unix(0, c.fl.expires), cancelled, due)
			case cancelled && !errors.Is(context.Cause(c.ctx), errCredentialDead):
				t.Fatalf("flight %d cancelled with %v, want errCredentialDead", i, context.Cause(c.ctx))
			}
		}
	}
	for i, c := range calls {
		if !removed[i] {
			f.remove(c.fl) // as serveModern does once the call ended, expired or not
		}
	}
	check()
	if n := f.count(); n != 0 {
		t.Fatalf("%d flights registered after every removal", n)
	}
	for i := range f.shards {
		if n := len(f.shards[i].due); n != 0 {
			t.Fatalf("shard %d keeps %d expiries after every removal", i, n)
		}
	}
}
