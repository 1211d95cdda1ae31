package mcphttp

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/agenthost/mcpruntime/actors/session"
)

// entry is one live session as the transport knows it.
type entry struct {
	id        string
	namespace string
	pid       *actor.PID
	act       *session.Activity
}

var (
	errGlobalCap    = errors.New("session limit reached")
	errNamespaceCap = errors.New("namespace session limit reached")
	errClosing      = errors.New("endpoint closing")
)

// registry counts sessions against the caps. A slot is reserved before
// initialize runs, so concurrent initializes cannot overshoot (SPEC §5).
type registry struct {
	mu       sync.RWMutex // guards the fields below
	max      int
	maxPerNS int
	reserved int                          // slots held, live sessions and initializes in progress
	perNS    map[string]int               // same, by namespace
	byID     map[string]*entry            // live sessions
	byNS     map[string]map[string]*entry // live sessions by namespace
	closed   bool
}

func (g *registry) init(max, maxPerNS int) {
	g.max, g.maxPerNS = max, maxPerNS
	g.perNS = map[string]int{}
	g.byID = map[string]*entry{}
	g.byNS = map[string]map[string]*entry{}
}

// reserve holds a slot for namespace. When the namespace is full it evicts
// its least recently active idle session, returned so the caller can end
// it; with none idle it fails with errNamespaceCap.
func (g *registry) reserve(namespace string) (evicted *entry, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil, errClosing
	}
	if g.perNS[namespace] >= g.maxPerNS {
		for _, e := range g.byNS[namespace] {
			if e.act.Busy() {
				continue
			}
			if evicted == nil || e.act.Last().Before(evicted.act.Last()) {
				evicted = e
			}
		}
		if evicted == nil {
			return nil, errNamespaceCap
		}
		g.removeLocked(evicted.id)
	}
	if evicted == nil && g.reserved >= g.max {
		return nil, errGlobalCap
	}
	g.reserved++
	g.perNS[namespace]++
	return evicted, nil
}

// unreserve gives back a slot whose initialize failed.
func (g *registry) unreserve(namespace string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.reserved--
	if g.perNS[namespace]--; g.perNS[namespace] <= 0 {
		delete(g.perNS, namespace)
	}
}

// commit turns a reservation into a live session.
func (g *registry) commit(e *entry) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.byID[e.id] = e
	if g.byNS[e.namespace] == nil {
		g.byNS[e.namespace] = map[string]*entry{}
	}
	g.byNS[e.namespace][e.id] = e
}

// release frees the slot of a session that ended. Called from the session
// actor's OnEnd, before a DELETE is answered; a session already removed by
// eviction is ignored.
func (g *registry) release(id string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.removeLocked(id)
}

func (g *registry) removeLocked(id string) {
	e := g.byID[id]
	if e == nil {
		return
	}
	delete(g.byID, id)
	delete(g.byNS[e.namespace], id)
	if len(g.byNS[e.namespace]) == 0 {
		delete(g.byNS, e.namespace)
	}
	g.reserved--
	if g.perNS[e.namespace]--; g.perNS[e.namespace] <= 0 {
		delete(g.perNS, e.namespace)
	}
}

// idle returns the live sessions with nothing open and no activity for
// at least d.
func (g *registry) idle(now time.Time, d time.Duration) []*entry {
	g.mu.RLock()
	defer g.mu.RUnlock()
	var out []*entry
	for _, e := range g.byID {
		if !e.act.Busy() && now.Sub(e.act.Last()) >= d {
			out = append(out, e)
		}
	}
	return out
}

func (g *registry) get(id string) *entry {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.byID[id]
}

func (g *registry) count() int {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return len(g.byID)
}

// closeAll refuses new sessions and returns the live ones.
func (g *registry) closeAll() []*entry {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
	out := make([]*entry, 0, len(g.byID))
	for _, e := range g.byID {
		out = append(out, e)
	}
	return out
}

// SessionInfo describes one live MCP session, for operators. It carries no
// token and no credential secret.
type SessionInfo struct {
	ID         string
	Owner      string // namespace
	Created    time.Time
	LastActive time.Time
	Busy       bool // a call in flight or a stream open
}

// SessionInfos lists the live sessions, ordered by id.
func (s *Server) SessionInfos() []SessionInfo {
	s.reg.mu.Lock()
	entries := make([]*entry, 0, len(s.reg.byID))
	for _, e := range s.reg.byID {
		entries = append(entries, e)
	}
	s.reg.mu.Unlock()
	r := s.store.Read()
	out := make([]SessionInfo, 0, len(entries))
	for _, e := range entries {
		info := SessionInfo{ID: e.id, Owner: e.namespace, LastActive: e.act.Last(), Busy: e.act.Busy()}
		if rec, err := r.MCPSession(nil, e.id); err == nil {
			info.Created = rec.Created
		}
		out = append(out, info)
	}
	slices.SortFunc(out, func(a, b SessionInfo) int { return strings.Compare(a.ID, b.ID) })
	return out
}
