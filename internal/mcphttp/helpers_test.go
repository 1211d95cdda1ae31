package mcphttp_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/agenthost/mcpruntime/internal/actortest"
	"github.com/agenthost/mcpruntime/internal/mcphttp"
	ht "github.com/agenthost/mcpruntime/internal/mcphttp/mcphttptest"
	"github.com/agenthost/mcpruntime/internal/principal"
	"github.com/agenthost/mcpruntime/internal/token"
	"github.com/agenthost/mcpruntime/memdb"
)

// fake is the endpoint's backend in this package's tests: its tokens are
// credential rows of a store of its own — hashed, looked up, revoked and
// expired as the runtime's are, so that the endpoint's dispatch check and
// its liveness monitor see them the same way — and its tools are
// functions the tests register.
type fake struct {
	t     testing.TB
	store *memdb.Store
	clock *actortest.Clock

	mu    sync.Mutex // guards the fields below
	tools []fakeTool
	n     int // credentials minted
}

type fakeTool struct {
	mcphttp.ToolDescriptor
	run func(ctx context.Context, p principal.Principal, args json.RawMessage, progress mcphttp.ProgressFunc) (*mcphttp.ToolResult, error)
}

// authError is the fake's authentication failure; it says why, as the
// runtime's does.
type authError struct{ reason string }

func (e *authError) Error() string      { return "unauthenticated: " + e.reason }
func (e *authError) AuthReason() string { return e.reason }

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

func newFake(t testing.TB) *fake {
	t.Helper()
	store, err := memdb.New()
	if err != nil {
		t.Fatal(err)
	}
	f := &fake{t: t, store: store, clock: actortest.NewClock(t0)}
	f.tool("whoami", func(_ context.Context, p principal.Principal, _ json.RawMessage, _ mcphttp.ProgressFunc) (*mcphttp.ToolResult, error) {
		return &mcphttp.ToolResult{Text: p.Kind + " " + p.Namespace, StructuredContent: map[string]string{"kind": p.Kind, "namespace": p.Namespace}}, nil
	})
	return f
}

// tool registers a tool; a later one of the same name replaces it.
func (f *fake) tool(name string, run func(ctx context.Context, p principal.Principal, args json.RawMessage, progress mcphttp.ProgressFunc) (*mcphttp.ToolResult, error)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tools = slices.DeleteFunc(f.tools, func(t fakeTool) bool { return t.Name == name })
	f.tools = append(f.tools, fakeTool{
		ToolDescriptor: mcphttp.ToolDescriptor{Name: name, Description: "test tool " + name, InputSchema: json.RawMessage(`{"type":"object"}`)},
		run:            run,
	})
	slices.SortFunc(f.tools, func(a, b fakeTool) int { return strings.Compare(a.Name, b.Name) })
}

// blocking registers a tool that blocks until its context is done.
func (f *fake) blocking(name string, progress bool) *ht.Blocking {
	b := ht.NewBlocking()
	f.tool(name, func(ctx context.Context, _ principal.Principal, _ json.RawMessage, p mcphttp.ProgressFunc) (*mcphttp.ToolResult, error) {
		if !progress {
			p = nil
		}
		return nil, b.Run(ctx, p)
	})
	return b
}

func (f *fake) Authenticate(tok string) (principal.Principal, error) {
	if !token.Valid(tok) {
		return principal.Principal{}, &authError{"malformed"}
	}
	c, err := f.store.Read().CredentialByTokenHash(token.Hash(tok))
	switch {
	case err != nil:
		return principal.Principal{}, &authError{"unknown"}
	case c.State != memdb.StateLive:
		return principal.Principal{}, &authError{"revoked"}
	case !c.LiveAt(f.clock.Now()):
		return principal.Principal{}, &authError{"expired"}
	}
	return principal.Principal{
		Kind: c.Kind, Namespace: c.Namespace, CredentialID: c.ID, Thread: c.Thread, Instance: c.Instance,
		Client: c.Client, Access: c.Access, Capabilities: slices.Clone(c.Capabilities), Expires: c.Expires,
	}, nil
}

func (f *fake) Tools() []mcphttp.ToolDescriptor {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]mcphttp.ToolDescriptor, len(f.tools))
	for i, t := range f.tools {
		out[i] = t.ToolDescriptor
	}
	return out
}

func (f *fake) CallTool(ctx context.Context, p principal.Principal, name string, args json.RawMessage, progress mcphttp.ProgressFunc) (*mcphttp.ToolResult, error) {
	f.mu.Lock()
	i := slices.IndexFunc(f.tools, func(t fakeTool) bool { return t.Name == name })
	var run func(context.Context, principal.Principal, json.RawMessage, mcphttp.ProgressFunc) (*mcphttp.ToolResult, error)
	if i >= 0 {
		run = f.tools[i].run
	}
	f.mu.Unlock()
	if run == nil {
		return nil, fmt.Errorf("tool %q: %w", name, mcphttp.ErrUnknownTool)
	}
	res, err := run(ctx, p, args, progress)
	if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return nil, err // cancelled, not failed
	}
	if err != nil {
		return &mcphttp.ToolResult{Text: "tool failed: " + err.Error(), IsError: true}, nil
	}
	return res, nil
}

// mint writes a live credential row and returns its token and id.
func (f *fake) mint(c memdb.Credential) (tok, id string) {
	f.t.Helper()
	f.mu.Lock()
	f.n++
	n := f.n
	f.mu.Unlock()
	prefix := token.Prefix
	if c.Kind == memdb.KindClient {
		prefix = token.ClientPrefix
	}
	tok, hash := token.NewWith(prefix)
	c.ID, c.TokenHash, c.State, c.Issued, c.LastLive = fmt.Sprintf("cred%d", n), hash, memdb.StateLive, f.clock.Now(), f.clock.Now()
	if c.Kind == memdb.KindProvider {
		c.Namespace = principal.ProviderNamespace(c.ID)
	}
	f.write(func(w *memdb.Writer) error { return w.PutCredential(&c) })
	return tok, c.ID
}

// provider mints the credential of (thread, instance): a namespace of its
// own. window, if not 0, is how long it stays live.
func (f *fake) provider(thread, instance string, window time.Duration) (tok, id string) {
	c := memdb.Credential{Kind: memdb.KindProvider, Thread: thread, Instance: instance}
	if window != 0 {
		c.Expires = f.clock.Now().Add(window)
	}
	return f.mint(c)
}

// client mints a token of client grant grant: every token of a grant
// shares its namespace.
func (f *fake) client(grant, access string, ttl time.Duration) (tok, id string) {
	c := memdb.Credential{Kind: memdb.KindClient, Client: grant, Access: access, Namespace: principal.ClientNamespace(grant)}
	if ttl != 0 {
		c.Expires = f.clock.Now().Add(ttl)
	}
	return f.mint(c)
}

// revoke marks credential id revoked, in one committed write, as the
// runtime's actors do.
func (f *fake) revoke(id string) {
	f.t.Helper()
	f.write(func(w *memdb.Writer) error {
		c, err := w.Credential(id)
		if err != nil {
			return err
		}
		c = c.Clone()
		c.State, c.RevokeReason, c.Revoked = memdb.StateRevoked, "revoked", f.clock.Now()
		return w.PutCredential(c)
	})
}

// remove deletes credential id's row (a deleted thread's credentials).
func (f *fake) remove(id string) {
	f.t.Helper()
	f.write(func(w *memdb.Writer) error { return w.DeleteCredential(id) })
}

func (f *fake) write(fn func(w *memdb.Writer) error) {
	f.t.Helper()
	if err := f.store.Write(fn); err != nil {
		f.t.Fatal(err)
	}
}

// mcpEnv is an endpoint over a fake backend behind httptest.NewServer.
type mcpEnv struct {
	*ht.Client
	f   *fake
	srv *mcphttp.Server
}

// newMCPEnv starts an endpoint over f with opts (the fake's clock, no
// logs), in an actor system of its own, closed at cleanup: the endpoint's
// sessions end first, so open streams return, then the server, then the
// actor system.
func newMCPEnv(t *testing.T, f *fake, opts mcphttp.Options) *mcpEnv {
	t.Helper()
	system := actor.NewActorSystem(
		actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }),
		actor.WithDeadLetterThrottleInterval(100*time.Millisecond),
		actor.WithDeadLetterRequestLogging(false),
	)
	t.Cleanup(system.Shutdown)
	if opts.Now == nil {
		opts.Now = f.clock.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	srv := mcphttp.New(f, f.store, system, opts)
	return &mcpEnv{Client: ht.New(t, srv), f: f, srv: srv}
}

// twoCredentials returns a fake with the provider tokens of (T, A) and
// (U, A): two namespaces.
func twoCredentials(t *testing.T) (f *fake, tok, other string) {
	t.Helper()
	f = newFake(t)
	tok, _ = f.provider("T", "A", 0)
	other, _ = f.provider("U", "A", 0)
	return f, tok, other
}

// mcpRecords returns the ids of the ownership records in the store.
func mcpRecords(t *testing.T, f *fake) []string {
	t.Helper()
	recs, err := f.store.Read().MCPSessions()
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, len(recs))
	for i, r := range recs {
		ids[i] = r.ID
	}
	slices.Sort(ids)
	return ids
}

// mcpRecord returns the ownership record of sid in the store, or nil. The
// store has no read by id for MCP sessions (nothing in the product asks),
// so the tests look through the listing.
func mcpRecord(f *fake, sid string) *memdb.MCPSession {
	recs, _ := f.store.Read().MCPSessions()
	for _, r := range recs {
		if r.ID == sid {
			return r
		}
	}
	return nil
}

// hasRecord reports whether the ownership record of sid exists.
func hasRecord(f *fake, sid string) bool { return mcpRecord(f, sid) != nil }

// waitSessionGone polls until the ownership record of sid is removed.
func waitSessionGone(t *testing.T, f *fake, what, sid string) {
	t.Helper()
	ht.WaitUntil(t, what+": session record removed", func() bool { return !hasRecord(f, sid) })
}

// waitInFlight waits until the endpoint holds exactly want.
func (e *mcpEnv) waitInFlight(what string, want mcphttp.InFlight) {
	e.T.Helper()
	ht.WaitUntil(e.T, fmt.Sprintf("%s: in flight %+v", what, want), func() bool { return e.srv.InFlight() == want })
}

// whoamiCall is a tools/call of the fake's whoami tool.
const whoamiCall = `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"whoami","arguments":{}}}`

// clientToken is a client grant's token, as issueClient returns it.
type clientToken struct{ ClientID, Token string }

// issueClient mints a token of a new client grant named label.
func issueClient(t *testing.T, f *fake, label, access string) (clientToken, string) {
	t.Helper()
	tok, id := f.client(label, access, 0)
	return clientToken{ClientID: label, Token: tok}, id
}

// openMinted mints the provider credential of (thread, instance) and
// returns its id and token.
func openMinted(t *testing.T, f *fake, thread, instance string) (id, tok string) {
	t.Helper()
	tok, id = f.provider(thread, instance, 0)
	return id, tok
}

func noErr(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
