package session

import (
	"errors"
	"sync"
)

// ErrTooManySubscriptions is the answer of Table.Subscribe for a session
// that holds its maximum of subscriptions already.
var ErrTooManySubscriptions = errors.New("too many subscriptions")

// subscriptions is a Table's index of resources/subscribe: the URIs each
// session subscribed (bySession) and, for the fan-out of
// notifications/resources/updated, the sessions each URI has. A session's
// subscriptions go with it: the Table drops them when it removes the
// session. The lock order is Table.mu, then subscriptions.mu.
type subscriptions struct {
	mu sync.Mutex // guards the fields below
	// bySession are the URIs each session subscribed: a session that never
	// subscribed pays nothing for them. Nil while none.
	bySession map[*Entry]map[string]struct{}
	byURI     map[string]map[*Entry]struct{} // nil while nothing is subscribed
}

// Subscribe records that live session e subscribed uri, at most max URIs
// per session (a URI subscribed again counts once and succeeds). It fails
// with ErrClosed once the session ended and ErrTooManySubscriptions past
// max.
func (t *Table) Subscribe(e *Entry, uri string, max int) error {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.byID[e.id] != e {
		return ErrClosed
	}
	ss := &t.subs
	ss.mu.Lock()
	defer ss.mu.Unlock()
	subs := ss.bySession[e]
	if _, ok := subs[uri]; ok {
		return nil
	}
	if len(subs) >= max {
		return ErrTooManySubscriptions
	}
	if subs == nil {
		if ss.bySession == nil {
			ss.bySession = map[*Entry]map[string]struct{}{}
		}
		subs = map[string]struct{}{}
		ss.bySession[e] = subs
	}
	subs[uri] = struct{}{}
	if ss.byURI == nil {
		ss.byURI = map[string]map[*Entry]struct{}{}
	}
	if ss.byURI[uri] == nil {
		ss.byURI[uri] = map[*Entry]struct{}{}
	}
	ss.byURI[uri][e] = struct{}{}
	return nil
}

// Unsubscribe removes uri from e's subscriptions; a URI it did not
// subscribe is ignored.
func (t *Table) Unsubscribe(e *Entry, uri string) {
	ss := &t.subs
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.dropLocked(e, uri)
}

func (ss *subscriptions) dropLocked(e *Entry, uri string) {
	subs := ss.bySession[e]
	if _, ok := subs[uri]; !ok {
		return
	}
	delete(subs, uri)
	if len(subs) == 0 {
		delete(ss.bySession, e)
		if len(ss.bySession) == 0 {
			ss.bySession = nil
		}
	}
	delete(ss.byURI[uri], e)
	if len(ss.byURI[uri]) == 0 {
		delete(ss.byURI, uri)
	}
	if len(ss.byURI) == 0 {
		ss.byURI = nil
	}
}

// dropAllLocked removes every subscription of e: it was removed from the
// table. t.mu is held.
func (t *Table) dropAllLocked(e *Entry) {
	ss := &t.subs
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for uri := range ss.bySession[e] {
		ss.dropLocked(e, uri)
	}
}

// Subscribers returns the sessions that subscribed uri.
func (t *Table) Subscribers(uri string) []*Entry {
	ss := &t.subs
	ss.mu.Lock()
	defer ss.mu.Unlock()
	set := ss.byURI[uri]
	if len(set) == 0 {
		return nil
	}
	out := make([]*Entry, 0, len(set))
	for e := range set {
		out = append(out, e)
	}
	return out
}

// Subscriptions returns how many URIs e subscribed.
func (t *Table) Subscriptions(e *Entry) int {
	t.subs.mu.Lock()
	defer t.subs.mu.Unlock()
	return len(t.subs.bySession[e])
}

// SubscribedURIs returns how many URIs the table's index holds: what every
// session subscribed, each URI once.
func (t *Table) SubscribedURIs() int {
	t.subs.mu.Lock()
	defer t.subs.mu.Unlock()
	return len(t.subs.byURI)
}

// LiveEntries returns the live sessions, in no order: the fan-out of list
// changes.
func (t *Table) LiveEntries() []*Entry {
	t.mu.RLock()
	defer t.mu.RUnlock()
	out := make([]*Entry, 0, len(t.byID))
	for _, e := range t.byID {
		out = append(out, e)
	}
	return out
}
