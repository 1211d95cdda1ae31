package driver

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/agenthost/mcpruntime/internal/fault"
)

// Binding is what a provider session needs to call back into the runtime on
// behalf of one thread: the MCP endpoint and the credential minted for the
// pair (thread, instance).
type Binding struct {
	Thread       string
	Instance     string
	CredentialID string
	Endpoint     string // MCP endpoint URL
	// Authorization is the value of the HTTP Authorization header,
	// "Bearer <token>". It is empty when the session is re-attached to a
	// thread whose credential it already holds: the runtime keeps no tokens,
	// only their hashes, so it cannot hand the same token out twice.
	Authorization string
	Capabilities  []string
}

// Clone returns a deep copy.
func (b Binding) Clone() Binding {
	b.Capabilities = slices.Clone(b.Capabilities)
	return b
}

// OpenRequest is given to [Driver.Open].
type OpenRequest struct {
	SessionID string  // provider session id the runtime assigned
	Instance  string  // provider instance id
	Binding   Binding // the first thread the session serves
	// Events reports on the session for as long as it lives. Safe to call
	// from any goroutine, at any time, any number of times.
	Events Events
}

// Events is how a driver reports what happens to a session it opened. Every
// method is safe to call from any goroutine, at any time, any number of
// times, and never blocks; reports after Close returned are dropped.
type Events interface {
	// Died says the session ended on its own (a process exited, a connection
	// dropped). The runtime releases the session: its credentials are
	// revoked unless another live provider session holds them. Calls after
	// the first, or after Close, are ignored.
	Died(err error)
	// Status reports the state of the agent's MCP connection to the runtime
	// for one thread it serves: up, failed, waiting for authorization.
	Status(s Status)
	// Event reports what the agent did during a turn: a message, a tool
	// call, its result, an error. Events of one session keep their order.
	Event(e Event)
	// TurnEnded reports that the agent's turn t.Turn (the id the runtime
	// gave in [Turn]) ended: it completed, failed, or was interrupted. The
	// runtime then ends the run of that id, if it is still the thread's
	// run: mutations by the agent's credential are refused from then on.
	TurnEnded(t TurnEnd)
}

// States of an agent's MCP connection ([Status].State).
const (
	StatusConnected = "connected"  // connected, and the tools were listed
	StatusPending   = "pending"    // connecting
	StatusNeedsAuth = "needs_auth" // the endpoint refused the credential
	StatusFailed    = "failed"     // anything else; Detail says what
)

// Status is the state of one agent's MCP connection, as the agent reports
// it.
type Status struct {
	Thread string // the thread whose credential the connection uses
	State  string // one of the Status… constants
	Detail string // the agent's own words, for a failure
}

// Kinds of [Event].
const (
	EventTurnStarted = "turn_started" // the agent began the turn
	EventMessage     = "message"      // the agent said something (Text)
	EventToolCall    = "tool_call"    // the agent called Tool with Data as its arguments
	EventToolResult  = "tool_result"  // the result of the call to Tool (Text; Error if it failed)
	EventError       = "error"        // the agent reported an error (Text)
)

// Event is one thing an agent did during a turn, in the agent's own terms
// translated to a small common vocabulary.
type Event struct {
	Thread string          // the thread the turn belongs to
	Turn   string          // the turn's id ([Turn].ID); "" outside a turn
	Kind   string          // one of the Event… constants
	Text   string          // a message's text, a result, an error (bounded by the driver)
	Tool   string          // the tool of a call or a result, as the agent names it
	Error  bool            // a tool result that is an error
	Data   json.RawMessage // the call's arguments (a JSON object), or nil
}

// Outcomes of a turn ([TurnEnd].Outcome).
const (
	TurnCompleted   = "completed"
	TurnFailed      = "failed"
	TurnInterrupted = "interrupted"
)

// TurnEnd says how a turn ended.
type TurnEnd struct {
	Thread  string
	Turn    string // the id of [Turn]
	Outcome string // one of the Turn… constants
	Error   string // the agent's error, for TurnFailed
}

// Turn is a prompt for the agent: the input of a run that a host started
// with one. Its ID is the run's id.
type Turn struct {
	Thread string
	ID     string
	Input  string
}

// Turner is implemented by a [Session] whose agent takes prompts (Codex,
// Claude Code, OpenCode): a run started with an input is the agent's turn.
// StartTurn sends t.Input to the agent and returns once the agent has
// accepted it (an error: the run is not started); the end of the turn is
// reported with [Events.TurnEnded]. Interrupt asks the agent to stop the
// turn t (the host ended the run, or switched the thread away); it returns
// once the agent took the request, and the turn's end is still reported.
// Both are serialized with the session's other calls.
type Turner interface {
	StartTurn(ctx context.Context, t Turn) error
	Interrupt(ctx context.Context, thread, turn string) error
}

// Session is one live provider process or connection.
type Session interface {
	// Attach binds another thread to the session (multi-thread drivers), or
	// re-binds a thread it serves with a new credential after a rotation
	// (any driver). A Binding with an empty Authorization re-attaches a
	// thread whose token the session already holds.
	Attach(ctx context.Context, b Binding) error
	// Detach unbinds a thread. The thread's credential stays live: a plain
	// detach is a handoff, and the session may be re-attached later.
	Detach(ctx context.Context, thread string) error
	// Close ends the session and releases everything it holds. It is called
	// exactly once, last.
	Close(ctx context.Context) error
}

// Driver is a provider kind: it knows how to start a session of one
// provider instance. It is built once per instance by its [Factory].
//
// Concurrency contract: the runtime calls Open and every Session method from
// a goroutine of its own, never from inside an actor, so a driver may block
// (start a process, dial, wait for a handshake) until ctx is done. For one
// session the calls are serialized: Open, then Attach/Detach in order, then
// Close; never two at once. Calls for different sessions of one instance
// may run concurrently. A driver must return promptly once ctx is done.
type Driver interface {
	// MultiThread reports whether one session serves several threads
	// (Attach binds more). An exclusive driver gets a session per thread.
	MultiThread() bool
	// Open starts a session for req.Binding's thread.
	Open(ctx context.Context, req OpenRequest) (Session, error)
}

// CloseBudgeter is implemented by a Driver whose sessions may take longer
// to close than the runtime's bound on a driver call: the exec driver
// gives a process its configured grace between SIGTERM and SIGKILL. A
// session's Close then gets the longer of the two (see [CloseTimeout]).
type CloseBudgeter interface {
	// CloseBudget is how long one session's Close may take.
	CloseBudget() time.Duration
}

// CloseTimeout is the bound on one Close of d's sessions: op, the bound on
// every driver call, or d's CloseBudget if that is longer.
func CloseTimeout(d Driver, op time.Duration) time.Duration {
	if b, ok := d.(CloseBudgeter); ok {
		return max(op, b.CloseBudget())
	}
	return op
}

// Factory builds the driver of one provider instance from its
// configuration. It validates config and returns a clear error if it is
// wrong; nothing is started until Open.
type Factory func(instance string, config json.RawMessage) (Driver, error)

// ErrUnknownDriver is returned when an instance names a driver kind that is
// not registered.
var ErrUnknownDriver = fault.ErrUnknownDriver

// ErrInvalidConfig wraps a Factory's refusal of an instance configuration.
var ErrInvalidConfig = fault.ErrInvalidDriverConfig

// ErrOpenFailed wraps a driver's failure to open a provider session.
var ErrOpenFailed = fault.ErrProviderOpenFailed

// Registry maps driver kind names ("inproc", "exec", …) to factories. The
// zero value is empty and ready to use; it is safe for concurrent use.
type Registry struct {
	mu        sync.RWMutex // guards factories
	factories map[string]Factory
}

// Register adds a driver kind. Registering a name twice replaces it.
func (r *Registry) Register(kind string, f Factory) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.factories == nil {
		r.factories = map[string]Factory{}
	}
	r.factories[kind] = f
}

// Build returns the driver for an instance of kind.
func (r *Registry) Build(kind, instance string, config json.RawMessage) (Driver, error) {
	r.mu.RLock()
	f, ok := r.factories[kind]
	r.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("driver %q: %w", kind, ErrUnknownDriver)
	}
	d, err := f(instance, config)
	if err != nil {
		return nil, fmt.Errorf("driver %q for instance %q: %w: %w", kind, instance, ErrInvalidConfig, err)
	}
	return d, nil
}

// Kinds returns the registered kind names, sorted.
func (r *Registry) Kinds() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	kinds := make([]string, 0, len(r.factories))
	for k := range r.factories {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	return kinds
}
