package transport

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The 2026-07-28 era on the same endpoint (SPEC §5a): stateless requests,
// each carrying its version and client capabilities in params._meta. A
// POST whose MCP-Protocol-Version header is 2026-07-28 is served here; it
// never creates, reads or echoes a session, and Last-Event-ID is not read.

// modernHeader reports whether r claims the 2026-07-28 era by its header.
func modernHeader(r *http.Request) bool { return r.Header.Get(headerProtocol) == modernVersion }

// modernCounts bounds the modern requests of each namespace in flight.
type modernCounts struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *modernCounts) admit(namespace string, limit int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n[namespace] >= limit {
		return false
	}
	if c.n == nil {
		c.n = make(map[string]int)
	}
	c.n[namespace]++
	return true
}

func (c *modernCounts) done(namespace string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n[namespace]--; c.n[namespace] <= 0 {
		delete(c.n, namespace)
	}
}

// handleModern serves a POST of the 2026-07-28 era: Origin/Host, the
// node's availability, the token and the home node first, as in every
// era; then Accept, Content-Type, the bounds and the body as in
// handlePost; then the ladder (modern_ladder.go), the token checked again, and
// dispatch.
func (s *Server) handleModern(w http.ResponseWriter, r *http.Request) {
	p, ok := s.front(w, r)
	if !ok {
		return
	}
	if !accepts(r, "application/json", "text/event-stream") {
		s.fail(w, failAcceptPost)
		return
	}
	if !isJSONContentType(r.Header.Get("Content-Type")) {
		s.fail(w, failContentType)
		return
	}
	if !s.admitRate(w, p.Namespace, 1, 1) || !s.admitRequest(w, p.Namespace) {
		return
	}
	held, admitted, counted := int64(0), true, false
	release := func() {
		if admitted {
			admitted = false
			s.limits.release(held)
			s.limits.done(p.Namespace)
		}
		if counted {
			counted = false
			s.modernCounts.done(p.Namespace)
		}
	}
	defer release()
	if !s.modernCounts.admit(p.Namespace, s.opts.MaxModernRequestsPerNamespace) {
		s.fail(w, failModernInFlight)
		return
	}
	counted = true
	body, n, ok := s.readBody(w, r)
	held = n
	if !ok || !s.recheck(w, p, nil) {
		return
	}
	msg, err := decodeMessage(body)
	switch {
	case errors.Is(err, errBatch):
		s.fail(w, failInvalidMessage) // the era has no batches: not one message
		return
	case err != nil:
		s.fail(w, failureOf(err))
		return
	case msg.isResponse():
		s.fail(w, failInvalidMessage) // no server→client requests in this era: nothing awaits one
		return
	case msg.isNotification():
		// notifications/cancelled included: ids are the client's, not
		// unique across its connections; closing the stream cancels.
		writeAccepted(w)
		return
	}
	meta, rej := readMeta(msg.Params)
	if rej == nil {
		rej = checkHeaders(r, msg, &meta)
	}
	if rej == nil && !modernMethod(msg.Method) {
		rej = &rejection{f: failModernMethod, message: "method not found: " + truncate(msg.Method, 128)}
	}
	if rej == nil && msg.Method == "tools/call" {
		rej = s.checkParamHeaders(r, p, msg.Params)
	}
	if rej != nil {
		s.reject(w, msg.ID, rej)
		return
	}
	switch msg.Method {
	case "server/discover":
		s.writeModern(w, msg.ID, s.discover(), discoverCache)
	case "subscriptions/listen":
		release() // a long-lived stream: bounded by the listen caps, not as a request
		s.listen(w, r, p, msg, &meta)
	default:
		s.serveModern(w, r, p, msg, &meta)
	}
}

// reject answers a ladder failure about the request with id.
func (s *Server) reject(w http.ResponseWriter, id json.RawMessage, rej *rejection) {
	a := &failures[rej.f]
	msg := rej.message
	if msg == "" {
		msg = a.message
	}
	s.failWith(w, rej.f, &response{JSONRPC: "2.0", ID: id, Error: &rpcError{Code: a.code, Message: msg, Data: rej.data}})
}

// discoverResult is server/discover's result.
type discoverResult struct {
	SupportedVersions []string                `json:"supportedVersions"`
	Capabilities      *mcp.ServerCapabilities `json:"capabilities"`
}

func (s *Server) discover() *discoverResult {
	return &discoverResult{SupportedVersions: allVersions, Capabilities: s.backend.Capabilities()}
}

// cache is the caching hint a modern result carries, if any.
type cache struct {
	set   bool
	ttlMs int
	scope string
}

// discoverCache: server/discover is the same for every principal.
var discoverCache = cache{set: true, ttlMs: 60000, scope: "public"}

// The methods whose complete results carry caching hints; the backend's
// lists already say theirs (private: they depend on the principal), and a
// read depends on who may read.
var cachedMethods = map[string]cache{
	"tools/list": {set: true, scope: "private"}, "prompts/list": {set: true, scope: "private"},
	"resources/list": {set: true, scope: "private"}, "resources/templates/list": {set: true, scope: "private"},
	"resources/read": {set: true, scope: "private"},
}

// writeModern answers id with result as a complete modern result: 200 JSON.
func (s *Server) writeModern(w http.ResponseWriter, id json.RawMessage, result any, c cache) {
	b, err := s.modernResult(result, "complete", c)
	if err != nil {
		s.opts.Logger.Error("encode result", "err", err)
		s.failFor(w, failBackendFailed, id, "")
		return
	}
	writeRaw(w, id, b)
}

// writeRaw writes the response {"jsonrpc","id","result": b}: 200 JSON.
func writeRaw(w http.ResponseWriter, id json.RawMessage, result []byte) {
	writeJSONBytes(w, appendRawResponse(nil, id, result))
}

func appendRawResponse(b []byte, id json.RawMessage, result []byte) []byte {
	b = append(b, `{"jsonrpc":"2.0","id":`...)
	b = append(b, id...)
	b = append(b, `,"result":`...)
	b = append(b, result...)
	return append(b, "}\n"...)
}

// modernResult marshals result with the members every modern result
// carries: resultType (unless it has one), the caching hints c (unless it
// has them), _meta.serverInfo merged into its own _meta.
func (s *Server) modernResult(result any, resultType string, c cache) ([]byte, error) {
	raw, err := json.Marshal(result)
	if err != nil {
		return nil, err
	}
	if len(raw) == 0 || raw[0] != '{' {
		raw = []byte("{}")
	}
	var meta []byte
	has := map[string]bool{}
	b := make([]byte, 0, len(raw)+128)
	b = append(b, '{')
	err = eachMember(raw, func(name, value []byte) error {
		if string(name) == "cacheScope" && string(value) == `""` {
			return nil // the SDK's zero Cacheable: the hint below says it
		}
		has[string(name)] = true
		if string(name) == "_meta" {
			meta = value
			return nil
		}
		if string(name) == "resultType" || ((string(name) == "content" || string(name) == "messages") && string(value) == "null") {
			return nil
		}
		b = appendJSONString(b, string(name))
		b = append(b, ':')
		b = append(b, value...)
		b = append(b, ',')
		return nil
	})
	if err != nil {
		return nil, err
	}
	b = append(b, `"resultType":`...)
	b = appendJSONString(b, resultType)
	if c.set && !has["ttlMs"] {
		b = append(b, `,"ttlMs":`...)
		b = append(b, []byte(itoa(c.ttlMs))...)
	}
	if c.set && !has["cacheScope"] {
		b = append(b, `,"cacheScope":`...)
		b = appendJSONString(b, c.scope)
	}
	b = append(b, `,"_meta":{`...)
	b = appendJSONString(b, metaServerInfo)
	b = append(b, ':')
	b = append(b, s.serverInfo...)
	if meta != nil && meta[0] == '{' {
		_ = eachMember(meta, func(name, value []byte) error {
			if string(name) != metaServerInfo {
				b = append(b, ',')
				b = appendJSONString(b, string(name))
				b = append(b, ':')
				b = append(b, value...)
			}
			return nil
		})
	}
	return append(b, "}}"...), nil
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// serveModern answers a feature request through the backend (Dispatch) in the
// 2026-07-28 era. The request's context is the connection's: the client
// going away cancels the call (the stream closing is the cancellation),
// and so does its credential's revocation or expiry, watched from the
// start, whether the answer is JSON or SSE.
func (s *Server) serveModern(w http.ResponseWriter, r *http.Request, p caller, msg *message, m *modernMeta) {
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	out := &modernWriter{w: w, s: s, ctx: ctx, progressToken: m.progressToken, logLevel: m.logLevel}
	// Its credential's revocation, or its expiry, ends the call.
	out.flight = flight{credential: p.CredentialID, expires: expiryOf(p.Expires), cancel: cancel}
	s.flights.add(&out.flight)
	defer s.flights.remove(&out.flight)
	switch {
	case s.deadSince(p) != "": // revoked between the recheck and the registration
		cancel(errCredentialDead)
	case s.closed.Load():
		cancel(errClosing)
	case !s.available(): // stopped serving between the recheck and the registration
		cancel(errUnavailable)
	}
	defer out.end()
	out.req = Request{
		Caller:             p.Principal,
		Era:                EraModern,
		ProtocolVersion:    modernVersion,
		ClientCapabilities: m.caps,
		Out:                out,
	}
	if rej := s.openState(&out.req, msg.Method, msg.Params, p); rej != nil {
		s.reject(w, msg.ID, rej)
		return
	}
	res := s.dispatch(ctx, msg.Method, msg.Params, &out.req)
	switch {
	case ctx.Err() != nil:
		out.abandon(msg.ID, context.Cause(ctx))
	case res.Err != nil:
		out.fail(res.failure(), &response{JSONRPC: "2.0", ID: msg.ID, Error: &rpcError{Code: res.Err.Code, Message: res.Err.Message, Data: res.Err.Data}})
	case res.InputRequests != nil:
		state, err := s.sealState(msg.Method, msg.Params, p, res.State, res.InputRequests)
		switch {
		case errors.Is(err, errBadSchema):
			out.fail(failBackendError, errorResponse(msg.ID, CodeInternalError, err.Error()))
			return
		case err != nil:
			s.opts.Logger.Error("seal requestState", "err", err)
			out.fail(failBackendFailed, errorResponse(msg.ID, failures[failBackendFailed].code, failures[failBackendFailed].message))
			return
		}
		out.answer(msg.ID, &inputRequired{InputRequests: res.InputRequests, RequestState: state}, "input_required", cache{})
	default:
		out.answer(msg.ID, res.Result, "complete", cachedMethods[msg.Method])
	}
}

// inputRequired is the body of an input_required result.
type inputRequired struct {
	InputRequests mcp.InputRequestMap `json:"inputRequests"`
	RequestState  string              `json:"requestState"`
}

// modernStream answers a GET or DELETE with the modern header, once its
// Origin/Host, availability and token pass and it is not forwarded, 405:
// the era has neither. False: not one.
func (s *Server) modernStream(w http.ResponseWriter, r *http.Request) bool {
	if !modernHeader(r) {
		return false
	}
	if _, ok := s.front(w, r); ok {
		s.fail(w, failModernStream)
	}
	return true
}
