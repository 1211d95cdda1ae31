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

// since returns up to max records with ids above after, oldest first;
// first is the oldest id the journal still holds (records between after
// and first were dropped: a reader that fell behind sees the gap); wake
// is closed once a later record is appended or the journal is closed.
func (j *journal) since(after uint64, limit int) (recs []ProviderRecord, first uint64, wake <-chan struct{}, closed bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	n := uint64(len(j.ring))
	first = j.next - n
	for id := max(after+1, first); id < j.next && len(recs) < limit; id++ {
		recs = append(recs, j.ring[int((id-1)%uint64(cap(j.ring)))])
	}
	return recs, first, j.wake, j.closed
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

// ProviderRecords returns up to max records of the provider journal with
// ids above after, oldest first, and a channel closed once a later record
// exists (or the runtime closed). The journal keeps the last
// Config.ProviderJournal records; oldest is the id of the oldest one it
// holds, so a reader whose after+1 is below it knows it missed records.
// It is how the admin API's event stream reads, resumably.
func (r *Runtime) ProviderRecords(after uint64, limit int) (recs []ProviderRecord, oldest uint64, next <-chan struct{}, err error) {
	recs, oldest, next, closed := r.journal.since(after, max(limit, 1))
	if closed && len(recs) == 0 {
		return nil, oldest, next, ErrClosed
	}
	return recs, oldest, next, nil
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
