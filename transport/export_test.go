package transport

// SessionState is what the tests read of a live session's shared state.
type SessionState struct {
	Streams int    // streams kept (not delivered to completion)
	Events  int    // events kept for resumption
	Bytes   int    // their bytes
	Dropped uint64 // events that went before they were delivered
	// Subscriptions is how many URIs the session subscribed.
	Subscriptions int
}

// State returns the shared state of live session sid of namespace ns; ok
// false if there is none. For testing.
func (s *Server) State(sid, ns string) (SessionState, bool) {
	e := s.sessions.Lookup(sid, ns)
	if e == nil {
		return SessionState{}, false
	}
	events, bytes, dropped := e.Streams().Kept()
	return SessionState{Streams: e.Streams().Len(), Events: events, Bytes: bytes, Dropped: dropped,
		Subscriptions: s.sessions.Subscriptions(e)}, true
}

// SubscribedURIs returns how many URIs the endpoint's subscription index
// holds, over all sessions. For testing.
func (s *Server) SubscribedURIs() int { return s.sessions.SubscribedURIs() }

// AsksPending returns how many of the runtime's requests to clients await
// an answer, over every live session. For testing.
func (s *Server) AsksPending() int {
	n := 0
	for _, info := range s.sessions.Summaries() {
		if e := s.sessions.Lookup(info.ID, info.Owner); e != nil {
			n += e.Asks().Pending()
		}
	}
	return n
}
