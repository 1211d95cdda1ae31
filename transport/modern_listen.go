package transport

import (
	"encoding/json"
	"net/http"
	"slices"
	"sync"
	"time"
)

// subscriptions/listen (SPEC §5a.7): a long-lived SSE response owned by
// the caller's namespace. Its first event acknowledges the subset of the
// filter honoured; then only the notifications opted into, each tagged
// with the subscription id — the listen request's own id, as the revision
// has it. The credential's revocation or expiry, or the namespace's end,
// closes it with no result; the endpoint's shutdown answers the listen
// request with a complete result, then closes.

// listenFilter is params.notifications.
type listenFilter struct {
	ToolsListChanged      bool     `json:"toolsListChanged,omitempty"`
	PromptsListChanged    bool     `json:"promptsListChanged,omitempty"`
	ResourcesListChanged  bool     `json:"resourcesListChanged,omitempty"`
	ResourceSubscriptions []string `json:"resourceSubscriptions,omitempty"`
}

// listener is one open listen stream.
type listener struct {
	c      caller
	filter listenFilter
	events chan listenEvent
	close  chan struct{} // closed once: the endpoint shuts down
}

// listenEvent is a notification for a listener; uri, if set, is checked
// readable by the listener's principal when it goes out.
type listenEvent struct {
	method string
	uri    string
}

// listeners is the registry of open listen streams.
type listeners struct {
	mu      sync.Mutex
	all     map[*listener]struct{}
	perNS   map[string]int
	closing bool
}

// add registers l unless a bound refuses it.
func (ls *listeners) add(l *listener, perNS, all int) (failure, bool) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	switch {
	case ls.closing || len(ls.all) >= all:
		return failListen, false
	case ls.perNS[l.c.Namespace] >= perNS:
		return failListenPerNS, false
	}
	if ls.all == nil {
		ls.all, ls.perNS = make(map[*listener]struct{}), make(map[string]int)
	}
	ls.all[l] = struct{}{}
	ls.perNS[l.c.Namespace]++
	return 0, true
}

func (ls *listeners) remove(l *listener) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if _, ok := ls.all[l]; !ok {
		return
	}
	delete(ls.all, l)
	if ls.perNS[l.c.Namespace]--; ls.perNS[l.c.Namespace] <= 0 {
		delete(ls.perNS, l.c.Namespace)
	}
}

// each calls fn for every open listener.
func (ls *listeners) each(fn func(*listener)) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	for l := range ls.all {
		fn(l)
	}
}

// closeAll refuses new listeners and tells the open ones to end.
func (ls *listeners) closeAll() {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.closing {
		return
	}
	ls.closing = true
	for l := range ls.all {
		close(l.close)
	}
}

// Open returns how many listen streams are open. For tests and metrics.
func (s *Server) ListenStreams() int {
	s.listeners.mu.Lock()
	defer s.listeners.mu.Unlock()
	return len(s.listeners.all)
}

// notifyListeners offers ev to every listener whose filter wants it,
// never blocking: a listener whose buffer is full loses it.
func (s *Server) notifyListeners(ev listenEvent, wants func(*listenFilter) bool) {
	s.listeners.each(func(l *listener) {
		if !wants(&l.filter) {
			return
		}
		select {
		case l.events <- ev:
		default:
			s.opts.Logger.Warn("listen stream notification dropped: the stream reads slower than they come")
		}
	})
}

// listen serves subscriptions/listen.
func (s *Server) listen(w http.ResponseWriter, r *http.Request, p caller, msg *message, m *modernMeta) {
	var params struct {
		Notifications *listenFilter `json:"notifications"`
	}
	if json.Unmarshal(msg.Params, &params) != nil {
		s.failFor(w, failModernMeta, msg.ID, "params.notifications must be an object")
		return
	}
	asked := listenFilter{}
	if params.Notifications != nil {
		asked = *params.Notifications
	}
	// The subset honoured: what the server declares; resources the
	// principal may read now (others are left out, unknown and refused
	// alike).
	l := &listener{c: p, events: make(chan listenEvent, 64), close: make(chan struct{})}
	l.filter.ToolsListChanged = asked.ToolsListChanged && s.declaresListChanged("tools")
	l.filter.PromptsListChanged = asked.PromptsListChanged && s.declaresListChanged("prompts")
	l.filter.ResourcesListChanged = asked.ResourcesListChanged && s.declaresListChanged("resources")
	if c := s.backend.Capabilities().Resources; c != nil && c.Subscribe {
		for _, uri := range asked.ResourceSubscriptions {
			if len(l.filter.ResourceSubscriptions) < s.opts.MaxSubscriptions && !slices.Contains(l.filter.ResourceSubscriptions, uri) && s.backend.CanRead(p.Principal, uri) {
				l.filter.ResourceSubscriptions = append(l.filter.ResourceSubscriptions, uri)
			}
		}
	}
	if f, ok := s.listeners.add(l, s.opts.MaxListenStreamsPerNamespace, s.opts.MaxListenStreams); !ok {
		s.failFor(w, f, msg.ID, "")
		return
	}
	defer s.listeners.remove(l)
	dead := make(chan struct{})
	var once sync.Once
	kill := func() { once.Do(func() { close(dead) }) }
	defer s.live.WatchCredential(p.CredentialID, kill)()
	defer s.live.WatchNamespace(p.Namespace, kill)()
	// Dead between the dispatch check and the watch: nothing was sent for
	// it yet, so it is answered as a request arriving now, 401 (an empty
	// 200 is no answer Streamable HTTP allows).
	if !s.recheck(w, p, nil) {
		return
	}

	tag := map[string]json.RawMessage{metaSubscriptionID: msg.ID}
	w.Header().Set("X-Accel-Buffering", "no")
	startEventStream(w)
	rc := http.NewResponseController(w)
	write := func(v any) bool {
		data, err := json.Marshal(v)
		if err != nil {
			return false
		}
		b := append(append([]byte("event: message\ndata: "), data...), "\n\n"...)
		if _, err := w.Write(b); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	ack := struct {
		Meta          map[string]json.RawMessage `json:"_meta"`
		Notifications listenFilter               `json:"notifications"`
	}{tag, l.filter}
	if !write(&notification{JSONRPC: "2.0", Method: "notifications/subscriptions/acknowledged", Params: ack}) {
		return
	}
	type tagged struct {
		Meta map[string]json.RawMessage `json:"_meta"`
		URI  string                     `json:"uri,omitempty"`
	}
	tick := time.NewTicker(s.opts.KeepAlive)
	defer tick.Stop()
	for {
		select {
		case ev := <-l.events:
			if ev.uri != "" && (s.deadSince(p) != "" || !s.backend.CanRead(p.Principal, ev.uri)) {
				continue
			}
			if !write(&notification{JSONRPC: "2.0", Method: ev.method, Params: tagged{Meta: tag, URI: ev.uri}}) {
				return
			}
		case <-tick.C:
			if _, err := w.Write([]byte(":\n\n")); err != nil || rc.Flush() != nil {
				return
			}
		case <-l.close:
			b, _ := s.modernResult(struct{}{}, "complete", cache{})
			// The result's _meta names the subscription too.
			res := append(appendRawResponse(nil, msg.ID, spliceMeta(b, metaSubscriptionID, msg.ID)), '\n')
			b = append([]byte("event: message\ndata: "), trimNewline(res)...)
			_, _ = w.Write(append(b, "\n\n"...))
			_ = rc.Flush()
			return
		case <-dead:
			return
		case <-r.Context().Done():
			return
		}
	}
}

// spliceMeta adds the member name: value to the _meta object that ends
// the modern result b (modernResult writes _meta last).
func spliceMeta(b []byte, name string, value json.RawMessage) []byte {
	out := append([]byte{}, b[:len(b)-2]...)
	out = append(out, ',')
	out = appendJSONString(out, name)
	out = append(out, ':')
	out = append(out, value...)
	return append(out, "}}"...)
}

// listChangedWants is the filter flag of each list kind.
var listChangedWants = map[string]func(*listenFilter) bool{
	"tools":     func(f *listenFilter) bool { return f.ToolsListChanged },
	"prompts":   func(f *listenFilter) bool { return f.PromptsListChanged },
	"resources": func(f *listenFilter) bool { return f.ResourcesListChanged },
}
