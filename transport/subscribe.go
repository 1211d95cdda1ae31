package transport

import (
	"encoding/json"
	"errors"
	"math/bits"
	"net/http"
	"slices"

	"github.com/agenthost/mcpruntime/actors/session"
)

// Subscriptions and the change feed (SPEC §5b.13–14). A session
// subscribes resources by URI (resources/subscribe, the endpoint's own
// method); the Table keeps each session's set and an index URI → sessions.
// The backend tells the endpoint of changes through ListChanged and
// ResourceUpdated, which queue a notification on the standalone stream of
// each session it concerns and return: the session's GET delivers it, and
// a resources/updated only if the GET's principal may read the URI then
// (Backend.CanRead at delivery). The queue is the session's stream buffer
// (Options.ReplayEvents, ReplayBytes): a reader slower than the changes
// loses the oldest, logged and counted.

// maxSubscriptionURI bounds the URI a session may subscribe, in bytes.
const maxSubscriptionURI = 4096

// subscribeParams are the params of resources/subscribe and unsubscribe.
type subscribeParams struct {
	URI string `json:"uri"`
}

// subscribe answers resources/subscribe (on) and resources/unsubscribe. A
// URI the caller may not read and one nothing is at get the same answer,
// the backend's for a resource not found (-32002 with data.uri); an
// unsubscribe always succeeds. A server that declares no resource
// subscriptions does not have the methods.
func (s *Server) subscribe(w http.ResponseWriter, p caller, e *session.Entry, msg *message, on bool) {
	if c := s.backend.Capabilities().Resources; c == nil || !c.Subscribe {
		s.failFor(w, failMethodNotFound, msg.ID, `method "`+msg.Method+`" not found`)
		return
	}
	var params subscribeParams
	if len(msg.Params) == 0 || json.Unmarshal(msg.Params, &params) != nil || params.URI == "" {
		s.failFor(w, failInvalidParams, msg.ID, msg.Method+" needs params.uri")
		return
	}
	if len(params.URI) > maxSubscriptionURI {
		s.failFor(w, failInvalidParams, msg.ID, msg.Method+": params.uri is too long")
		return
	}
	if !on {
		s.sessions.Unsubscribe(e, params.URI)
		writeResult(w, msg.ID, struct{}{})
		return
	}
	if !s.backend.CanRead(p.Principal, params.URI) {
		s.failWith(w, failResourceNotFound, &response{JSONRPC: "2.0", ID: msg.ID,
			Error: &rpcError{Code: CodeResourceNotFound, Message: "Resource not found", Data: subscribeParams{URI: params.URI}}})
		return
	}
	switch err := s.sessions.Subscribe(e, params.URI, s.opts.MaxSubscriptions); {
	case errors.Is(err, session.ErrTooManySubscriptions):
		s.failFor(w, failTooManySubscriptions, msg.ID, "")
		return
	case err != nil:
		s.fail(w, failUnknownSession) // ended between the owner check and now
		return
	}
	writeResult(w, msg.ID, struct{}{})
}

// listChangedMethods are the notifications of ListChanged, by kind.
var listChangedMethods = map[string]string{
	"tools":     "notifications/tools/list_changed",
	"prompts":   "notifications/prompts/list_changed",
	"resources": "notifications/resources/list_changed",
}

// ListChanged tells every session whose standalone stream is open that the
// list of kind ("tools", "prompts" or "resources") changed: a
// notifications/<kind>/list_changed each, if the server declares listChanged
// for it. It never blocks on a client. An unknown kind is ignored.
func (s *Server) ListChanged(kind string) {
	method, ok := listChangedMethods[kind]
	if !ok || !s.declaresListChanged(kind) {
		return
	}
	s.notifyListeners(listenEvent{method: method}, listChangedWants[kind])
	data, _ := json.Marshal(&notification{JSONRPC: "2.0", Method: method})
	for _, e := range s.sessions.LiveEntries() {
		s.queue(e, data, "")
	}
}

func (s *Server) declaresListChanged(kind string) bool {
	c := s.backend.Capabilities()
	switch kind {
	case "tools":
		return c.Tools != nil && c.Tools.ListChanged
	case "prompts":
		return c.Prompts != nil && c.Prompts.ListChanged
	}
	return c.Resources != nil && c.Resources.ListChanged
}

// ResourceUpdated tells the sessions that subscribed uri that the resource
// changed: a notifications/resources/updated each, on its standalone
// stream if one is open, delivered only if the stream's principal may read
// uri when it goes out. It never blocks on a client.
func (s *Server) ResourceUpdated(uri string) {
	s.notifyListeners(listenEvent{method: "notifications/resources/updated", uri: uri}, func(f *listenFilter) bool {
		return slices.Contains(f.ResourceSubscriptions, uri)
	})
	subs := s.sessions.Subscribers(uri)
	if len(subs) == 0 {
		return
	}
	data, _ := json.Marshal(&notification{JSONRPC: "2.0", Method: "notifications/resources/updated", Params: subscribeParams{URI: uri}})
	for _, e := range subs {
		s.queue(e, data, uri)
	}
}

// queue puts a notification on e's standalone stream, if open. An event
// that pushed out one its client had not had yet is logged, at each power
// of two of the session's count of them, so that a storm logs a few lines.
func (s *Server) queue(e *session.Entry, data []byte, check string) {
	_, dropped := e.Notify(data, check)
	if dropped > 0 && bits.OnesCount64(dropped) == 1 {
		s.opts.Logger.Warn("session notifications dropped: its stream reads slower than they come",
			"session", e.ID(), "dropped", dropped)
	}
}
