package session

import (
	"errors"
	"strconv"
	"sync"
)

// ErrTooManyAsks is the answer of Asks.Begin when the session's pending
// asks would pass MaxPendingAsks.
var ErrTooManyAsks = errors.New("too many requests to the client pending")

// MaxPendingAsks bounds the requests the runtime has sent to one session's
// client and awaits the answers of (elicitation/create,
// sampling/createMessage, roots/list), over all of its calls.
const MaxPendingAsks = 64

// Asks is the table of one session's pending server→client requests — the
// runtime's own asks of a 2025-era client — shared with the HTTP path like
// Calls: the request that asks registers its asks here and waits on their
// Round; a POSTed JSON-RPC response of the session's owner answers one by
// its id. Ids are "srv-<n>", unique in the session for its whole life, so a
// late answer can never reach a later ask. Only the session's own requests
// reach its table (the endpoint's owner check comes first): a response
// posted by another namespace is a 404 before it gets here. The zero value
// is ready and holds nothing: a session that never asked allocates nothing.
type Asks struct {
	mu      sync.Mutex      // guards the fields below
	next    uint64          // the last ask number issued
	pending map[string]*Ask // by id key (the JSON string, quoted); nil while none
	closed  bool            // the session ended: nothing may be asked
}

// Ask is one pending server→client request.
type Ask struct {
	key   string // the id as JSON ("\"srv-1\""), the key a response's id is matched by
	round *Round
	index int // its place in the round
}

// Round is the asks one request sends at once, and their answers as they
// come: one buffered channel of the round's size, so Answer never blocks.
type Round struct {
	asks    []*Ask
	answers chan Answered
}

// Answered is the client's answer to one ask: the raw JSON-RPC result, or
// its error.
type Answered struct {
	Index  int    // the ask's place in its round
	Result []byte // the response's result; nil with Error
	Error  []byte // the response's error object; nil with Result
}

// Begin registers n asks of one request and returns their round. It fails
// with ErrClosed once the session ended and with ErrTooManyAsks when the
// session would hold more than MaxPendingAsks.
func (a *Asks) Begin(n int) (*Round, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.closed:
		return nil, ErrClosed
	case len(a.pending)+n > MaxPendingAsks:
		return nil, ErrTooManyAsks
	}
	if a.pending == nil {
		a.pending = make(map[string]*Ask, n)
	}
	r := &Round{asks: make([]*Ask, n), answers: make(chan Answered, n)}
	for i := range r.asks {
		a.next++
		ask := &Ask{key: `"srv-` + strconv.FormatUint(a.next, 10) + `"`, round: r, index: i}
		r.asks[i] = ask
		a.pending[ask.key] = ask
	}
	return r, nil
}

// ID returns the ask's JSON-RPC id as JSON (a string).
func (k *Ask) ID() []byte { return []byte(k.key) }

// Asks returns the round's asks, in the order Begin was asked for them.
func (r *Round) Asks() []*Ask { return r.asks }

// Answers delivers the round's answers, each once, as they come.
func (r *Round) Answers() <-chan Answered { return r.answers }

// Answer hands the client's response with id key (the key of its JSON-RPC
// id, as the endpoint computes it) to the ask it answers, and reports
// whether there was one: an unknown id, one already answered and one whose
// request gave up are false, and the response is dropped.
func (a *Asks) Answer(key string, result, rpcErr []byte) bool {
	a.mu.Lock()
	ask := a.pending[key]
	if ask != nil {
		delete(a.pending, key)
		if len(a.pending) == 0 {
			a.pending = nil
		}
	}
	a.mu.Unlock()
	if ask == nil {
		return false
	}
	ask.round.answers <- Answered{Index: ask.index, Result: result, Error: rpcErr} // buffered: one per ask
	return true
}

// End unregisters what is left of a round: its request has every answer,
// or gave up. It returns the asks still unanswered, for which the client
// may be told (notifications/cancelled).
func (a *Asks) End(r *Round) []*Ask {
	a.mu.Lock()
	defer a.mu.Unlock()
	var left []*Ask
	for _, ask := range r.asks {
		if a.pending[ask.key] == ask {
			delete(a.pending, ask.key)
			left = append(left, ask)
		}
	}
	if len(a.pending) == 0 {
		a.pending = nil
	}
	return left
}

// Pending returns how many asks await an answer.
func (a *Asks) Pending() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.pending)
}

// close drops every pending ask and refuses new ones: the session ended.
// The requests that wait on them see their own context cancelled (Calls
// close cancels them), and End finds nothing left.
func (a *Asks) close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.closed = true
	a.pending = nil
}
