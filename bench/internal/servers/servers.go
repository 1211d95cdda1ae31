// Package servers builds the benchmarked MCP servers. Each serves the same
// one tool on /mcp behind bearer authentication, and can mint and revoke
// tokens for the load generator. The tool (Options.Tool) is "echo"
// (arguments {"text": string}, result: that text) unless it is
// "runtime_capabilities" (arguments {}, result: who the caller is and
// which tools it may call, as structuredContent and as its JSON text): the
// runtime's built-in, the one read tool the shipped binary has that needs
// no thread. The runtime then serves its built-ins only, as the binary
// does; the peers and the floor serve a stand-in that builds the same
// result (the same keys and values, a map encoded as JSON twice) for
// every caller. The implementations:
//
//   - runtime: this module's runtime; tokens are real client grants, one
//     grant per token, revoked with Runtime.RevokeClient.
//   - runtime-audit: the same runtime with its audit trail on
//     (Config.Audit: a record per call in its journal);
//   - runtime-events: the same runtime with its admin event stream
//     (GET /admin/v1/events) followed from the start;
//   - runtime-observed: both, for the cost of what an operator watches;
//   - runtime-stalled: the audit trail on, and an event stream opened by a
//     reader that never reads: a slow consumer must not slow the runtime.
//   - gosdk: the official MCP Go SDK's stateful Streamable HTTP handler for
//     2025 requests and its stateless one for 2026-07-28 requests.
//   - mcpgo: mcp-go's stateful Streamable HTTP server, which serves
//     2026-07-28 requests itself, statelessly, beside its sessions.
//   - floor: a bare net/http JSON-RPC handler with no MCP sessions, the
//     cost of HTTP and JSON alone.
//   - binary, binary-raised: the shipped `runtime serve` in a child
//     process (StartBinary), with its default flags or its session caps
//     raised as the runtime's here; not built by New.
//
// The runtime and mcpgo serve both eras on one handler, as the
// specification allows; go-sdk v1.8.0 needs one handler per era.
//
// The peers and the floor check tokens with the same middleware over an
// in-memory token set (TokenSet): the peers have no credential model of
// their own, so this is the cheapest honest stand-in.
package servers

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/agenthost/mcpruntime/bench/internal/result"
)

// Names of the implementations, as -impl takes them.
const (
	Runtime         = "runtime"
	RuntimeAudit    = "runtime-audit"
	RuntimeEvents   = "runtime-events"
	RuntimeObserved = "runtime-observed"
	RuntimeStalled  = "runtime-stalled"
	GoSDK           = "gosdk"
	MCPGo           = "mcpgo"
	Floor           = "floor"
	Binary          = "binary"
	BinaryRaised    = "binary-raised"
)

// Names lists every implementation New builds, in this process.
var Names = []string{Runtime, RuntimeAudit, RuntimeEvents, RuntimeObserved, RuntimeStalled, GoSDK, MCPGo, Floor}

// Shipped lists the implementations that are the shipped binary in a
// child process (StartBinary).
var Shipped = []string{Binary, BinaryRaised}

// The tools a server may serve (Options.Tool).
const (
	EchoTool         = result.EchoTool
	CapabilitiesTool = "runtime_capabilities"
)

// ErrUnknownToken is returned by Revoke for a token the server never
// issued or already revoked.
var ErrUnknownToken = errors.New("unknown token")

// Path is where every implementation serves MCP.
const Path = "/mcp"

// echoDescription is the echo tool's description everywhere.
const echoDescription = "Returns its text argument."

// echoSchema is the echo tool's input schema, for the implementations
// that take one as JSON.
const echoSchema = `{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`

// modernVersion is the protocol version of the stateless era.
const modernVersion = "2026-07-28"

// modernHeader reports whether h names a 2026-07-28 (or later) protocol
// version in MCP-Protocol-Version, as every request of that era must. The
// versions are dates, so they compare as strings (go-sdk does the same).
func modernHeader(h http.Header) bool {
	return h.Get("MCP-Protocol-Version") >= modernVersion
}

// capabilitiesDescription is the stand-in runtime_capabilities's
// description.
const capabilitiesDescription = "Who the caller is, its capabilities, and which tools it may call now."

// standInClientID is the clientId of the stand-in's result: the peers have
// no client grants; it has the length of the runtime's ids.
const standInClientID = "cl_00000000000000000000000000000000"

// standInCapabilities is the stand-in runtime_capabilities's result for a
// read-only client: the keys and values of the runtime's answer to a
// read-only client grant when it serves its built-ins only, as the
// runtime builds it — a typed value, its fields in the order of their
// JSON names.
type standInCapabilities struct {
	Access        string   `json:"access"`
	Capabilities  []string `json:"capabilities"`
	ClientID      string   `json:"clientId"`
	NamespaceKind string   `json:"namespaceKind"`
	Tools         []string `json:"tools"`
}

// capabilities is a fresh stand-in result per call, as the runtime builds
// one.
func capabilities() standInCapabilities {
	return standInCapabilities{
		Access:        "read-only",
		Capabilities:  []string{},
		ClientID:      standInClientID,
		NamespaceKind: "client",
		Tools:         []string{"runtime_capabilities", "thread_list", "thread_read"},
	}
}

// echoArgs are the echo tool's arguments.
type echoArgs struct {
	Text string `json:"text"`
}

// Server is one benchmarked implementation.
type Server interface {
	// Handler serves MCP on Path.
	Handler() http.Handler
	// IssueTokens returns n fresh bearer tokens, each its own principal.
	IssueTokens(ctx context.Context, n int) ([]string, error)
	// Revoke revokes token. Once it returns, no request bearing the token
	// may succeed.
	Revoke(ctx context.Context, token string) error
	// Close releases the server's resources.
	Close() error
}

// Options configure New.
type Options struct {
	// MaxSessions and MaxSessionsPerNamespace are the runtime's session
	// caps (the peers have none). Zero: the runtime's defaults.
	MaxSessions             int
	MaxSessionsPerNamespace int
	// Tool is the one tool served: EchoTool or CapabilitiesTool. Zero:
	// EchoTool.
	Tool string
	// Logger receives the servers' logs.
	Logger *slog.Logger
}

// New builds the implementation called name.
func New(name string, opts Options) (Server, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	switch opts.Tool {
	case "":
		opts.Tool = EchoTool
	case EchoTool, CapabilitiesTool:
	default:
		return nil, fmt.Errorf("tool %q: the servers serve %s or %s", opts.Tool, EchoTool, CapabilitiesTool)
	}
	if slices.Contains(Shipped, name) {
		return nil, fmt.Errorf("%s is the shipped binary in a child process: see StartBinary", name)
	}
	switch name {
	case Runtime:
		return newRuntime(opts, false, noEvents)
	case RuntimeAudit:
		return newRuntime(opts, true, noEvents)
	case RuntimeEvents:
		return newRuntime(opts, false, eventsRead)
	case RuntimeObserved:
		return newRuntime(opts, true, eventsRead)
	case RuntimeStalled:
		return newRuntime(opts, true, eventsStalled)
	case GoSDK:
		return newGoSDK(opts), nil
	case MCPGo:
		return newMCPGo(opts), nil
	case Floor:
		return newFloor(opts.Tool), nil
	}
	return nil, fmt.Errorf("unknown implementation %q (want one of %s)", name, strings.Join(append(slices.Clone(Names), Shipped...), ", "))
}

// TokenSet is the peers' credential store: a set of random bearer tokens.
// It is safe for concurrent use.
type TokenSet struct {
	mu     sync.RWMutex
	tokens map[string]struct{}
}

// Issue adds n new random tokens and returns them.
func (ts *TokenSet) Issue(n int) []string {
	out := make([]string, n)
	for i := range out {
		var b [32]byte
		_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
		out[i] = hex.EncodeToString(b[:])
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.tokens == nil {
		ts.tokens = make(map[string]struct{}, n)
	}
	for _, t := range out {
		ts.tokens[t] = struct{}{}
	}
	return out
}

// Revoke removes tok; it fails with ErrUnknownToken if tok is not in the
// set.
func (ts *TokenSet) Revoke(tok string) error {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if _, ok := ts.tokens[tok]; !ok {
		return ErrUnknownToken
	}
	delete(ts.tokens, tok)
	return nil
}

// Valid reports whether tok is in the set.
func (ts *TokenSet) Valid(tok string) bool {
	ts.mu.RLock()
	defer ts.mu.RUnlock()
	_, ok := ts.tokens[tok]
	return ok
}

// RequireBearer serves next only to requests whose Authorization header
// carries a token of ts; others get 401 with WWW-Authenticate: Bearer.
func RequireBearer(ts *TokenSet, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, ok := bearerToken(r.Header.Get("Authorization"))
		if !ok || !ts.Valid(tok) {
			w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// bearerToken extracts the token of an "Authorization: Bearer <token>"
// header value (the scheme is case-insensitive).
func bearerToken(header string) (string, bool) {
	scheme, tok, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || tok == "" {
		return "", false
	}
	return tok, true
}

// peer is what the token-set implementations share.
type peer struct {
	tokens TokenSet
}

func (p *peer) IssueTokens(_ context.Context, n int) ([]string, error) {
	return p.tokens.Issue(n), nil
}

func (p *peer) Revoke(_ context.Context, tok string) error { return p.tokens.Revoke(tok) }

// mount serves h on Path behind the peer's bearer check.
func (p *peer) mount(h http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle(Path, RequireBearer(&p.tokens, h))
	return mux
}
