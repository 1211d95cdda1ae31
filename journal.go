package mcpruntime

import (
	"encoding/json"
	"sync"
	"time"

	"github.com/agenthost/mcpruntime/actors/provider"
	"github.com/agenthost/mcpruntime/internal/credential"
)

// Record is one entry of the journal: what the provider actors and the
// agents' drivers reported, what the runtime's state and endpoints did
// (events.go), and the audit of calls, numbered in the order the runtime
// heard it. It holds no secret: ids, states, reasons, and what an agent
// said and did (its messages, tool calls and their results); never a
// token, a hash, or a call's arguments unless its tool opted in.
type Record struct {
	ID       uint64    `json:"id"`
	Time     time.Time `json:"time"`
	Kind     string    `json:"kind"` // one of the Record… constants
	Instance string    `json:"instance,omitempty"`
	Session  string    `json:"session,omitempty"` // a provider session
	Thread   string    `json:"thread,omitempty"`
	Turn     string    `json:"turn,omitempty"`  // the run id of an agent's turn
	State    string    `json:"state,omitempty"` // a status's state, a turn's outcome, a close's reason, an instance's driver
	Text     string    `json:"text,omitempty"`  // a message, a result, an error, a status's detail
	Tool     string    `json:"tool,omitempty"`
	Error    bool      `json:"error,omitempty"` // a tool result that is an error
	// Data is an agent's tool call's arguments, or an audited call's when
	// its tool opted in (Tool.AuditArguments).
	Data json.RawMessage `json:"data,omitempty"`

	Run        string `json:"run,omitempty"`
	Credential string `json:"credential,omitempty"` // a credential's id, never its token
	From       string `json:"from,omitempty"`       // a switch's previous instance, a rotation's previous credential
	Reason     string `json:"reason,omitempty"`     // why a credential was revoked, a session closed, a call refused
	Seq        uint64 `json:"seq,omitempty"`        // a posted message's sequence number
	Client     string `json:"client,omitempty"`     // a client grant's id
	Via        string `json:"via,omitempty"`        // how a grant came: admin, oauth, jwt
	ClientName string `json:"clientName,omitempty"` // an OAuth client's or an MCP client's name, as it gave it
	MCPSession string `json:"mcpSession,omitempty"` // an MCP session's id
	Protocol   string `json:"protocol,omitempty"`   // an MCP session's protocol version
	// Principal is the namespace of the caller concerned ("cred:<id>",
	// "client:<id>"); PrincipalKind is its kind (provider, client).
	Principal     string `json:"principal,omitempty"`
	PrincipalKind string `json:"principalKind,omitempty"`

	// An audited call (audit.tool, audit.resource, audit.prompt).
	URI        string  `json:"uri,omitempty"`     // a resource read's URI
	Prompt     string  `json:"prompt,omitempty"`  // a prompt get's name
	Outcome    string  `json:"outcome,omitempty"` // ok, refused, error, cancelled, input_required
	Code       string  `json:"code,omitempty"`    // a refusal's or an error's stable code
	DurationMs float64 `json:"durationMs,omitempty"`
}

// Kinds of Record: the provider events, then what agents reported
// (driver.Event… kinds appear as "agent.<kind>").
const (
	RecordSessionOpened  = "session.opened"
	RecordSessionClosed  = "session.closed"
	RecordThreadAttached = "thread.attached"
	RecordThreadDetached = "thread.detached"
	RecordAgentStatus    = "agent.status"
	RecordTurnEnded      = "turn.ended"
)

// journal is the bounded, numbered log of provider records: a ring of the
// last Config.Journal records, and a channel closed at every
// append (and at close) for the readers that wait for the next one.
type journal struct {
	mu   sync.Mutex // guards the fields below
	ring []Record
	next uint64 // the id of the next record; ids start at 1
	// wake is closed at the next append when waited is set: a reader was
	// handed it (since), so appends nobody waits for make no channel.
	wake   chan struct{}
	waited bool
	closed bool
}

func newJournal(size int) *journal {
	return &journal{ring: make([]Record, 0, size), next: 1, wake: make(chan struct{})}
}

// append numbers rec and keeps a copy of it: rec stays the caller's (on
// its stack, as a rule).
func (j *journal) append(rec *Record) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		return
	}
	id := j.next
	j.next++
	if len(j.ring) < cap(j.ring) {
		j.ring = append(j.ring, *rec)
	} else {
		j.ring[int((id-1)%uint64(cap(j.ring)))] = *rec
	}
	j.ring[int((id-1)%uint64(cap(j.ring)))].ID = id
	if j.waited {
		close(j.wake)
		j.wake = make(chan struct{})
		j.waited = false
	}
}

func (j *journal) close() {
	j.mu.Lock()
	defer j.mu.Unlock()
	if !j.closed {
		j.closed = true
		close(j.wake)
	}
}

// since returns up to limit records with ids above after, oldest first,
// appended to dst[:0] (dst's array reused when it has room).
func (j *journal) since(dst []Record, after uint64, limit int) (page RecordPage, closed bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	page.Oldest = j.next - uint64(len(j.ring))
	page.Newest = j.next - 1
	page.Records = dst[:0]
	for id := max(after+1, page.Oldest); id < j.next && len(page.Records) < limit; id++ {
		page.Records = append(page.Records, j.ring[int((id-1)%uint64(cap(j.ring)))])
	}
	page.Next = j.wake
	j.waited = true
	return page, j.closed
}

// record turns a provider event into a journal record; false for an event
// the journal does not keep.
func record(evt provider.Event, now time.Time) (Record, bool) {
	switch e := evt.(type) {
	case *provider.SessionOpened:
		return Record{Time: now, Kind: RecordSessionOpened, Instance: e.Session.Instance, Session: e.Session.ID, Thread: first(e.Session.Threads)}, true
	case *provider.SessionClosed:
		return Record{Time: now, Kind: RecordSessionClosed, Instance: e.Session.Instance, Session: e.Session.ID, State: e.Reason, Text: e.Cause}, true
	case *provider.ThreadAttached:
		return Record{Time: now, Kind: RecordThreadAttached, Instance: e.Instance, Session: e.SessionID, Thread: e.Thread}, true
	case *provider.ThreadDetached:
		return Record{Time: now, Kind: RecordThreadDetached, Instance: e.Instance, Session: e.SessionID, Thread: e.Thread}, true
	case *provider.AgentStatus:
		return Record{Time: now, Kind: RecordAgentStatus, Instance: e.Instance, Session: e.SessionID, Thread: e.Status.Thread, State: e.Status.State, Text: e.Status.Detail}, true
	case *provider.AgentEvent:
		ev := e.Event
		return Record{Time: now, Kind: "agent." + ev.Kind, Instance: e.Instance, Session: e.SessionID, Thread: ev.Thread, Turn: ev.Turn, Text: ev.Text, Tool: ev.Tool, Error: ev.Error, Data: ev.Data}, true
	case *provider.TurnEnded:
		t := e.TurnEnd
		return Record{Time: now, Kind: RecordTurnEnded, Instance: e.Instance, Session: e.SessionID, Thread: t.Thread, Turn: t.Turn, State: t.Outcome, Text: t.Error}, true
	}
	return Record{}, false
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

// RecordPage is one read of the journal.
type RecordPage struct {
	Records []Record // oldest first
	// Oldest is the id of the oldest record the journal still holds
	// (Newest+1 when it holds none): a reader whose next id is below it
	// missed the records in between, dropped by the journal's bound.
	Oldest uint64
	// Newest is the id of the newest record so far (0: none yet).
	Newest uint64
	// Next is closed once a record after Newest exists, or the runtime
	// closed.
	Next <-chan struct{}
}

// Records reads up to limit records of the journal with
// ids above after. The journal keeps the last Config.Journal
// records. It is how the admin API's event stream reads, resumably; it
// returns ErrClosed once the runtime closed and nothing is left to read.
func (r *Runtime) Records(after uint64, limit int) (RecordPage, error) {
	return r.RecordsInto(nil, after, limit)
}

// RecordsInto is Records with the page's records appended to dst[:0], so
// that a reader that reads on and on (the admin event stream) reuses one
// array.
func (r *Runtime) RecordsInto(dst []Record, after uint64, limit int) (RecordPage, error) {
	page, closed := r.journal.since(dst, after, max(limit, 1))
	if closed && len(page.Records) == 0 {
		return page, ErrClosed
	}
	return page, nil
}

// heard is the runtime's subscriber to the actor system's event stream:
// every provider event is journaled, and the end of an agent's turn ends
// its run — on a goroutine of its own, since a subscriber runs on the
// publisher's (an actor's or a driver's) and must not wait.
func (r *Runtime) heard(evt any) {
	if ce, ok := evt.(*credential.Event); ok {
		for _, rec := range credentialRecords(ce, r.cfg.Now()) {
			r.journal.append(&rec)
		}
		return
	}
	e, ok := evt.(provider.Event)
	if !ok {
		return
	}
	if rec, ok := record(e, r.cfg.Now()); ok {
		r.journal.append(&rec)
	}
	te, ok := e.(*provider.TurnEnded)
	if !ok {
		return
	}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	r.work.Add(1)
	r.mu.Unlock()
	go func() {
		defer r.work.Done()
		r.turnEnded(te)
	}()
}
