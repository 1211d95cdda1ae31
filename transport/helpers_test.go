package transport_test

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
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/mcpruntime/internal/actortest"
	"github.com/agenthost/mcpruntime/internal/fault"
	"github.com/agenthost/mcpruntime/internal/principal"
	"github.com/agenthost/mcpruntime/internal/token"
	"github.com/agenthost/mcpruntime/memdb"
	"github.com/agenthost/mcpruntime/transport"
	ht "github.com/agenthost/mcpruntime/transport/transporttest"
)

// fake is the endpoint's backend in this package's tests: its tokens are
// credential rows of a store of its own — hashed, looked up, revoked and
// expired as the runtime's are, so that the endpoint's dispatch check and
// its liveness monitor see them the same way — and its tools and
// resources are what the tests register.
type fake struct {
	t     testing.TB
	store *memdb.Store
	clock *actortest.Clock

	mu        sync.Mutex // guards the fields below
	tools     []fakeTool
	resources map[string]fakeResource            // by URI
	caps      *mcp.ServerCapabilities            // nil: everything
	headers   map[string][]transport.ParamHeader // x-mcp-header markings by tool
	n         int                                // credentials minted
}

// toolFunc is the body of one of the fake's tools: it gets the caller, the
// arguments and the request's Output.
type toolFunc func(ctx context.Context, p principal.Principal, args json.RawMessage, out transport.Output) (*mcp.CallToolResult, error)

type fakeTool struct {
	name  string
	serve func(ctx context.Context, req *transport.Request, args json.RawMessage) transport.Response
}

// fakeResource is a text resource; readers are the namespaces that may
// read it (none: every caller).
type fakeResource struct {
	text    string
	readers []string
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
	f := &fake{t: t, store: store, clock: actortest.NewClock(t0), resources: map[string]fakeResource{}}
	f.tool("whoami", func(_ context.Context, p principal.Principal, _ json.RawMessage, _ transport.Output) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{
			Content:           []mcp.Content{&mcp.TextContent{Text: p.Kind + " " + p.Namespace}},
			StructuredContent: map[string]string{"kind": p.Kind, "namespace": p.Namespace},
		}, nil
	})
	return f
}

// textResult is a tool result of one text block.
func textResult(text string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}
}

// tool registers a tool; a later one of the same name replaces it. An
// error is the tool's failure (an isError result), unless the request's
// context is done: a cancellation, answered with nothing.
func (f *fake) tool(name string, run toolFunc) {
	f.serveTool(name, func(ctx context.Context, req *transport.Request, args json.RawMessage) transport.Response {
		res, err := run(ctx, req.Caller, args, req.Out)
		switch {
		case err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()):
			return transport.Response{} // cancelled, not failed
		case err != nil:
			res = textResult("tool failed: " + err.Error())
			res.IsError = true
		case res == nil:
			res = &mcp.CallToolResult{}
		}
		return transport.Response{Result: res}
	})
}

// serveTool registers a tool that answers the whole Response itself (input
// requests, its own errors).
func (f *fake) serveTool(name string, serve func(ctx context.Context, req *transport.Request, args json.RawMessage) transport.Response) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tools = slices.DeleteFunc(f.tools, func(t fakeTool) bool { return t.name == name })
	f.tools = append(f.tools, fakeTool{name: name, serve: serve})
	slices.SortFunc(f.tools, func(a, b fakeTool) int { return strings.Compare(a.name, b.name) })
}

// resource registers a text resource at uri that the namespaces readers
// may read (none: everyone).
func (f *fake) resource(uri, text string, readers ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.resources[uri] = fakeResource{text: text, readers: readers}
}

// removeResource removes the resource at uri.
func (f *fake) removeResource(uri string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.resources, uri)
}

// blocking registers a tool that blocks until its context is done.
func (f *fake) blocking(name string, progress bool) *ht.Blocking {
	b := ht.NewBlocking()
	f.tool(name, func(ctx context.Context, _ principal.Principal, _ json.RawMessage, out transport.Output) (*mcp.CallToolResult, error) {
		var p func(float64, float64, string)
		if progress {
			p = out.Progress
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

// Capabilities declares everything the endpoint serves, unless a test set
// f.caps.
func (f *fake) Capabilities() *mcp.ServerCapabilities {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.caps != nil {
		return f.caps
	}
	return &mcp.ServerCapabilities{
		Completions: &mcp.CompletionCapabilities{},
		Logging:     &mcp.LoggingCapabilities{},
		Prompts:     &mcp.PromptCapabilities{ListChanged: true},
		Resources:   &mcp.ResourceCapabilities{Subscribe: true, ListChanged: true},
		Tools:       &mcp.ToolCapabilities{ListChanged: true},
	}
}

// ParamHeaders implements transport.ParamHeaders from f.headers.
func (f *fake) ParamHeaders(_ principal.Principal, tool string) []transport.ParamHeader {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.headers[tool]
}

// CanRead: the resource exists and p's namespace is among its readers.
func (f *fake) CanRead(p principal.Principal, uri string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.resources[uri]
	return ok && (len(r.readers) == 0 || slices.Contains(r.readers, p.Namespace))
}

func (f *fake) ListTools(context.Context, *transport.Request, string) (*mcp.ListToolsResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	res := &mcp.ListToolsResult{Tools: make([]*mcp.Tool, len(f.tools))}
	for i, t := range f.tools {
		res.Tools[i] = &mcp.Tool{Name: t.name, Description: "test tool " + t.name, InputSchema: json.RawMessage(`{"type":"object"}`)}
	}
	return res, nil
}

// CallTool runs the tool's serve: its Response's Result, or its input
// requests and state as the result that asks; an empty Response is a
// cancellation.
func (f *fake) CallTool(ctx context.Context, req *transport.Request, name string, args json.RawMessage) (*mcp.CallToolResult, error) {
	f.mu.Lock()
	i := slices.IndexFunc(f.tools, func(t fakeTool) bool { return t.name == name })
	var serve func(context.Context, *transport.Request, json.RawMessage) transport.Response
	if i >= 0 {
		serve = f.tools[i].serve
	}
	f.mu.Unlock()
	if serve == nil {
		return nil, fault.ErrUnknownTool
	}
	res := serve(ctx, req, args)
	switch r, _ := res.Result.(*mcp.CallToolResult); {
	case r != nil:
		return r, nil
	case res.InputRequests != nil:
		return &mcp.CallToolResult{InputRequests: res.InputRequests, RequestState: res.State}, nil
	case ctx.Err() != nil:
		return nil, ctx.Err()
	}
	return nil, fmt.Errorf("tool %s answered %+v", name, res)
}

func (f *fake) ReadResource(_ context.Context, req *transport.Request, uri string) (*mcp.ReadResourceResult, error) {
	if !f.CanRead(req.Caller, uri) {
		return nil, fault.ErrResourceNotFound
	}
	f.mu.Lock()
	text := f.resources[uri].text
	f.mu.Unlock()
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, MIMEType: "text/plain", Text: text}}}, nil
}

// The features the fake does not serve.

func (f *fake) ListResources(context.Context, *transport.Request, string) (*mcp.ListResourcesResult, error) {
	return nil, transport.ErrNotServed
}

func (f *fake) ListResourceTemplates(context.Context, *transport.Request, string) (*mcp.ListResourceTemplatesResult, error) {
	return nil, transport.ErrNotServed
}

func (f *fake) ListPrompts(context.Context, *transport.Request, string) (*mcp.ListPromptsResult, error) {
	return nil, transport.ErrNotServed
}

func (f *fake) GetPrompt(context.Context, *transport.Request, string, map[string]string) (*mcp.GetPromptResult, error) {
	return nil, transport.ErrNotServed
}

func (f *fake) Complete(context.Context, *transport.Request, *mcp.CompleteParams) (*mcp.CompleteResult, error) {
	return nil, transport.ErrNotServed
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
	srv *transport.Server
}

// newMCPEnv starts an endpoint over f with opts (the fake's clock, no
// logs), in an actor system of its own, closed at cleanup: the endpoint's
// sessions end first, so open streams return, then the server, then the
// actor system.
func newMCPEnv(t *testing.T, f *fake, opts transport.Options) *mcpEnv {
	t.Helper()
	return newMCPEnvHost(t, f, opts, transport.Host{})
}

// newMCPEnvHost is newMCPEnv with what a host wires in (the fake's clock
// when host has none).
func newMCPEnvHost(t *testing.T, f *fake, opts transport.Options, host transport.Host) *mcpEnv {
	t.Helper()
	system := actor.NewActorSystem(
		actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }),
		actor.WithDeadLetterThrottleInterval(100*time.Millisecond),
		actor.WithDeadLetterRequestLogging(false),
	)
	t.Cleanup(system.Shutdown)
	if host.Now == nil {
		host.Now = f.clock.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	srv := transport.New(f, f.store, system, opts, host)
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
func (e *mcpEnv) waitInFlight(what string, want transport.InFlight) {
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
