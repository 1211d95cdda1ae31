package mcpruntime

import (
	"encoding/json"
	"sync"
	"time"

	"github.com/agenthost/mcpruntime/actors/provider"
)

// ProviderRecord is one entry of the provider journal: what the provider
// actors and the agents' drivers reported, numbered in the order the
// runtime heard it. It holds no secret: ids, states, and what an agent
// said and did (its messages, tool calls and their results).
type ProviderRecord struct {
	ID       uint64          `json:"id"`
	Time     time.Time       `json:"time"`
	Kind     string          `json:"kind"` // one of the Record… constants
	Instance string          `json:"instance"`
	Session  string          `json:"session,omitempty"`
	Thread   string          `json:"thread,omitempty"`
	Turn     string          `json:"turn,omitempty"`  // the run id of an agent's turn
	State    string          `json:"state,omitempty"` // a status's state, a turn's outcome, a close's reason
	Text     string          `json:"text,omitempty"`  // a message, a result, an error, a status's detail
	Tool     string          `json:"tool,omitempty"`
	Error    bool            `json:"error,omitempty"` // a tool result that is an error
	Data     json.RawMessage `json:"data,omitempty"`  // a tool call's arguments
}

// Kinds of ProviderRecord: the provider events, then what agents reported
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
// last Config.ProviderJournal records, and a channel closed at every
// append (and at close) for the readers that wait for the next one.
type journal struct {
	mu     sync.Mutex // guards the fields below
	ring   []ProviderRecord
	next   uint64 // the id of the next record; ids start at 1
	wake   chan struct{}
	closed bool
}

func newJournal(size int) *journal {
	return &journal{ring: make([]ProviderRecord, 0, size), next: 1, wake: make(chan struct{})}
}

func (j *journal) append(rec ProviderRecord) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		return
	}
	rec.ID = j.next
	j.next++
	if len(j.ring) < cap(j.ring) {
		j.ring = append(j.ring, rec)
	} else {
		j.ring[int((rec.ID-1)%uint64(cap(j.ring)))] = rec
	}
	close(j.wake)
	j.wake = make(chan struct{})
}

func (j *journal) close() {
	j.mu.Lock()
	defer j.mu.Unlock()
	if !j.closed {
		j.closed = true
		close(j.wake)
	}
}

// since returns up to limit records with ids above after, oldest first.
func (j *journal) since(after uint64, limit int) (page ProviderPage, closed bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	page.Oldest = j.next - uint64(len(j.ring))
	page.Newest = j.next - 1
	for id := max(after+1, page.Oldest); id < j.next && len(page.Records) < limit; id++ {
		page.Records = append(page.Records, j.ring[int((id-1)%uint64(cap(j.ring)))])
	}
	page.Next = j.wake
	return page, j.closed
}

// record turns a provider event into a journal record; false for an event
// the journal does not keep.
func record(evt provider.Event, now time.Time) (ProviderRecord, bool) {
	switch e := evt.(type) {
	case *provider.SessionOpened:
		return ProviderRecord{Time: now, Kind: RecordSessionOpened, Instance: e.Session.Instance, Session: e.Session.ID, Thread: first(e.Session.Threads)}, true
	case *provider.SessionClosed:
		return ProviderRecord{Time: now, Kind: RecordSessionClosed, Instance: e.Session.Instance, Session: e.Session.ID, State: e.Reason, Text: e.Cause}, true
	case *provider.ThreadAttached:
		return ProviderRecord{Time: now, Kind: RecordThreadAttached, Instance: e.Instance, Session: e.SessionID, Thread: e.Thread}, true
	case *provider.ThreadDetached:
		return ProviderRecord{Time: now, Kind: RecordThreadDetached, Instance: e.Instance, Session: e.SessionID, Thread: e.Thread}, true
	case *provider.AgentStatus:
		return ProviderRecord{Time: now, Kind: RecordAgentStatus, Instance: e.Instance, Session: e.SessionID, Thread: e.Status.Thread, State: e.Status.State, Text: e.Status.Detail}, true
	case *provider.AgentEvent:
		ev := e.Event
		return ProviderRecord{Time: now, Kind: "agent." + ev.Kind, Instance: e.Instance, Session: e.SessionID, Thread: ev.Thread, Turn: ev.Turn, Text: ev.Text, Tool: ev.Tool, Error: ev.Error, Data: ev.Data}, true
	case *provider.TurnEnded:
		t := e.TurnEnd
		return ProviderRecord{Time: now, Kind: RecordTurnEnded, Instance: e.Instance, Session: e.SessionID, Thread: t.Thread, Turn: t.Turn, State: t.Outcome, Text: t.Error}, true
	}
	return ProviderRecord{}, false
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

// ProviderPage is one read of the provider journal.
type ProviderPage struct {
	Records []ProviderRecord // oldest first
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

// ProviderRecords reads up to limit records of the provider journal with
// ids above after. The journal keeps the last Config.ProviderJournal
// records. It is how the admin API's event stream reads, resumably; it
// returns ErrClosed once the runtime closed and nothing is left to read.
func (r *Runtime) ProviderRecords(after uint64, limit int) (ProviderPage, error) {
	page, closed := r.journal.since(after, max(limit, 1))
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
	e, ok := evt.(provider.Event)
	if !ok {
		return
	}
	if rec, ok := record(e, r.cfg.Now()); ok {
		r.journal.append(rec)
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
