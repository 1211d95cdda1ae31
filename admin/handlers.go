package admin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/julienschmidt/httprouter"

	mcpruntime "github.com/agenthost/mcpruntime"
)

// ---- request decoding ----

// decode reads r's JSON body into dst, strictly: the body must be
// application/json, at most MaxBodyBytes, one JSON value with no unknown
// fields and nothing after it. With optional, an empty body leaves dst as
// it is.
func decode(w http.ResponseWriter, r *http.Request, dst any, optional bool) error {
	if optional && r.ContentLength == 0 {
		return nil
	}
	jsonType := isJSON(r.Header.Get("Content-Type"))
	// An optional body of unknown length may still turn out empty; only
	// then is a missing Content-Type acceptable.
	if !jsonType && !(optional && r.ContentLength < 0) {
		return errMediaType
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return errTooLarge
		}
		return invalidRequest("reading the request body failed")
	}
	if len(body) == 0 {
		if optional {
			return nil
		}
		return invalidRequest("request body required")
	}
	if !jsonType {
		return errMediaType
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return invalidRequest("malformed request body: " + describe(err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return invalidRequest("malformed request body: data after the JSON value")
	}
	return nil
}

// describe says what is wrong with a body in the request's terms, not in
// those of the Go types it is decoded into.
func describe(err error) string {
	if e, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
		if e.Field == "" {
			return fmt.Sprintf("want a JSON object, got %s", e.Value)
		}
		return fmt.Sprintf("field %q: want %s, got %s", e.Field, jsonKind(e.Type.Kind().String()), e.Value)
	}
	if e, ok := errors.AsType[*json.SyntaxError](err); ok {
		return fmt.Sprintf("invalid JSON at byte %d", e.Offset)
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return "truncated JSON"
	}
	// Unknown fields: `json: unknown field "x"`.
	return strings.TrimPrefix(err.Error(), "json: ")
}

// jsonKind names a Go kind as JSON does.
func jsonKind(kind string) string {
	switch kind {
	case "slice", "array":
		return "array"
	case "struct", "map":
		return "object"
	case "bool":
		return "boolean"
	}
	return kind
}

func isJSON(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && mt == "application/json"
}

// required fails with 400 when a required string field is empty. Pairs
// are (name, value).
func required(fields ...string) error {
	for i := 0; i+1 < len(fields); i += 2 {
		if fields[i+1] == "" {
			return invalidRequest(fmt.Sprintf("field %q is required", fields[i]))
		}
	}
	return nil
}

// ---- response shapes ----

func location(w http.ResponseWriter, format string, args ...any) {
	esc := make([]any, len(args))
	for i, a := range args {
		esc[i] = url.PathEscape(fmt.Sprint(a))
	}
	w.Header().Set("Location", fmt.Sprintf(format, esc...))
}

// ---- instances ----

type createInstanceRequest struct {
	ID           string          `json:"id"`
	Driver       string          `json:"driver"`
	Config       json.RawMessage `json:"config"`
	Capabilities []string        `json:"capabilities"`
}

func (s *Server) createInstance(w http.ResponseWriter, r *http.Request, _ httprouter.Params) (int, any, error) {
	var req createInstanceRequest
	if err := decode(w, r, &req, false); err != nil {
		return 0, nil, err
	}
	if err := required("id", req.ID, "driver", req.Driver); err != nil {
		return 0, nil, err
	}
	err := s.rt.RegisterInstance(r.Context(), req.ID, mcpruntime.InstanceSpec{
		Driver: req.Driver, Config: req.Config, Capabilities: req.Capabilities,
	})
	if err != nil {
		return 0, nil, err
	}
	// The config is not echoed (InstanceInfo has none): it may hold the
	// driver's secrets.
	inst, err := s.rt.Instance(req.ID)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusCreated, inst, nil
}

// ---- threads ----

type createThreadRequest struct {
	ID       string `json:"id"`
	Instance string `json:"instance"`
}

func (s *Server) createThread(w http.ResponseWriter, r *http.Request, _ httprouter.Params) (int, any, error) {
	var req createThreadRequest
	if err := decode(w, r, &req, false); err != nil {
		return 0, nil, err
	}
	if err := required("id", req.ID); err != nil {
		return 0, nil, err
	}
	t, err := s.rt.CreateThread(r.Context(), req.ID, mcpruntime.ThreadOptions{Instance: req.Instance})
	if err != nil {
		return 0, nil, err
	}
	location(w, "/admin/v1/threads/%s", t.ID)
	return http.StatusCreated, t, nil
}

type threadList struct {
	Threads []mcpruntime.Thread `json:"threads"` // without their messages
	// NextCursor, given back as ?cursor=, lists the next page; absent on
	// the last one.
	NextCursor string `json:"nextCursor,omitempty"`
}

// listThreads answers one page: ?limit= (default
// mcpruntime.DefaultPageSize, at most mcpruntime.MaxPageSize) threads
// after ?cursor=.
func (s *Server) listThreads(_ http.ResponseWriter, r *http.Request, _ httprouter.Params) (int, any, error) {
	opts, err := listOptions(r)
	if err != nil {
		return 0, nil, err
	}
	page, err := s.rt.ListThreads(r.Context(), opts)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, threadList{Threads: page.Threads, NextCursor: page.NextCursor}, nil
}

// listOptions reads a listing's ?limit= and ?cursor=: a limit that is not
// a whole number from 1, or an empty cursor, is 400 invalid_request.
func listOptions(r *http.Request) (mcpruntime.ListOptions, error) {
	q := r.URL.Query()
	opts := mcpruntime.ListOptions{Cursor: q.Get("cursor")}
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 {
			return opts, invalidRequest(fmt.Sprintf("limit %q: want a whole number from 1 to %d", l, mcpruntime.MaxPageSize))
		}
		opts.Limit = n
	}
	if _, ok := q["cursor"]; ok && opts.Cursor == "" {
		return opts, invalidRequest("cursor is empty: omit it for the first page")
	}
	return opts, nil
}

func (s *Server) getThread(_ http.ResponseWriter, r *http.Request, ps httprouter.Params) (int, any, error) {
	t, err := s.rt.Thread(r.Context(), ps.ByName("id"))
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, t, nil
}

// goneJSON is the answer of a DELETE: what is gone, and its state now.
type goneJSON struct {
	ID                string `json:"id,omitempty"`
	ProviderSessionID string `json:"providerSessionId,omitempty"`
	ClientID          string `json:"clientId,omitempty"`
	Status            string `json:"status"` // "deleted", "released" or "revoked"
}

func (s *Server) deleteThread(_ http.ResponseWriter, r *http.Request, ps httprouter.Params) (int, any, error) {
	id := ps.ByName("id")
	if err := s.rt.DeleteThread(r.Context(), id); err != nil {
		return 0, nil, err
	}
	return http.StatusOK, goneJSON{ID: id, Status: "deleted"}, nil
}

// threadAfter answers a change of a thread with the thread as it is now.
func (s *Server) threadAfter(r *http.Request, id string) (int, any, error) {
	t, err := s.rt.Thread(r.Context(), id)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, t, nil
}

func (s *Server) detach(_ http.ResponseWriter, r *http.Request, ps httprouter.Params) (int, any, error) {
	if err := s.rt.Detach(r.Context(), ps.ByName("id")); err != nil {
		return 0, nil, err
	}
	return s.threadAfter(r, ps.ByName("id"))
}

func (s *Server) archive(_ http.ResponseWriter, r *http.Request, ps httprouter.Params) (int, any, error) {
	if err := s.rt.Archive(r.Context(), ps.ByName("id")); err != nil {
		return 0, nil, err
	}
	return s.threadAfter(r, ps.ByName("id"))
}

// instanceRequest is the body of the routes that act on (thread, instance).
type instanceRequest struct {
	Instance string `json:"instance"`
}

func decodeInstance(w http.ResponseWriter, r *http.Request) (string, error) {
	var req instanceRequest
	if err := decode(w, r, &req, false); err != nil {
		return "", err
	}
	return req.Instance, required("instance", req.Instance)
}

// ---- provider sessions ----

type providerSessionJSON struct {
	ProviderSessionID string `json:"providerSessionId"`
	// Instance and Driver say what was opened: a session of an inproc
	// instance starts no process.
	Instance     string `json:"instance"`
	Driver       string `json:"driver"`
	CredentialID string `json:"credentialId"`
	Endpoint     string `json:"endpoint"`
	// Authorization is present only in the answer that minted the
	// credential: a token is shown once.
	Authorization string   `json:"authorization,omitempty"`
	Capabilities  []string `json:"capabilities"`
	Reused        bool     `json:"reused"`
}

func (s *Server) openProviderSession(w http.ResponseWriter, r *http.Request, ps httprouter.Params) (int, any, error) {
	instance, err := decodeInstance(w, r)
	if err != nil {
		return 0, nil, err
	}
	p, err := s.rt.OpenProviderSession(r.Context(), ps.ByName("id"), instance)
	if err != nil {
		return 0, nil, err
	}
	out := providerSessionJSON{
		ProviderSessionID: p.ID,
		Instance:          instance,
		CredentialID:      p.CredentialID,
		Endpoint:          p.Endpoint,
		Capabilities:      p.Capabilities,
		Reused:            p.Reused,
	}
	if inst, err := s.rt.Instance(instance); err == nil {
		out.Driver = inst.Driver
	}
	location(w, "/admin/v1/provider-sessions/%s", p.ID)
	if p.Reused {
		return http.StatusOK, out, nil
	}
	out.Authorization = p.Authorization
	return http.StatusCreated, out, nil
}

func (s *Server) releaseProviderSession(_ http.ResponseWriter, r *http.Request, ps httprouter.Params) (int, any, error) {
	id := ps.ByName("id")
	if err := s.rt.ReleaseProviderSession(r.Context(), id); err != nil {
		return 0, nil, err
	}
	return http.StatusOK, goneJSON{ProviderSessionID: id, Status: "released"}, nil
}

// ---- switch, rotate, runs ----

type switchJSON struct {
	Instance string `json:"instance"`
	Previous string `json:"previous"`           // "" if the thread had none
	EndedRun string `json:"endedRun,omitempty"` // the run the switch ended
}

func (s *Server) switchProvider(w http.ResponseWriter, r *http.Request, ps httprouter.Params) (int, any, error) {
	instance, err := decodeInstance(w, r)
	if err != nil {
		return 0, nil, err
	}
	res, err := s.rt.SwitchProvider(r.Context(), ps.ByName("id"), instance)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, switchJSON{Instance: instance, Previous: res.Previous, EndedRun: res.EndedRun}, nil
}

func (s *Server) rotate(w http.ResponseWriter, r *http.Request, ps httprouter.Params) (int, any, error) {
	instance, err := decodeInstance(w, r)
	if err != nil {
		return 0, nil, err
	}
	c, err := s.rt.Rotate(r.Context(), ps.ByName("id"), instance)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, c, nil
}

type runIDJSON struct {
	RunID string `json:"runId"`
}

// startRunRequest is a run's body: with an input, the run is the agent's
// turn (Runtime.StartTurn).
type startRunRequest struct {
	Instance string  `json:"instance"`
	Input    *string `json:"input"`
}

func (s *Server) startRun(w http.ResponseWriter, r *http.Request, ps httprouter.Params) (int, any, error) {
	var req startRunRequest
	if err := decode(w, r, &req, false); err != nil {
		return 0, nil, err
	}
	if err := required("instance", req.Instance); err != nil {
		return 0, nil, err
	}
	id := ps.ByName("id")
	var run string
	var err error
	if req.Input != nil {
		run, err = s.rt.StartTurn(r.Context(), id, req.Instance, *req.Input)
	} else {
		run, err = s.rt.StartRun(r.Context(), id, req.Instance)
	}
	if err != nil {
		return 0, nil, err
	}
	location(w, "/admin/v1/threads/%s/runs/current", id)
	return http.StatusCreated, runIDJSON{RunID: run}, nil
}

func (s *Server) endRun(_ http.ResponseWriter, r *http.Request, ps httprouter.Params) (int, any, error) {
	if err := s.rt.EndRun(r.Context(), ps.ByName("id"), ""); err != nil {
		return 0, nil, err
	}
	return s.threadAfter(r, ps.ByName("id"))
}

// ---- client grants ----

type issueClientRequest struct {
	Label  string `json:"label"`
	Access string `json:"access"`
}

func (s *Server) issueClient(w http.ResponseWriter, r *http.Request, _ httprouter.Params) (int, any, error) {
	var req issueClientRequest
	if err := decode(w, r, &req, false); err != nil {
		return 0, nil, err
	}
	if err := required("access", req.Access); err != nil {
		return 0, nil, err
	}
	c, err := s.rt.IssueClient(r.Context(), req.Label, req.Access)
	if err != nil {
		return 0, nil, err
	}
	location(w, "/admin/v1/clients/%s", c.ClientID)
	return http.StatusCreated, c, nil
}

type refreshClientRequest struct {
	RevokePrevious bool `json:"revokePrevious"`
}

type tokenJSON struct {
	Token string `json:"token"`
}

func (s *Server) refreshClient(w http.ResponseWriter, r *http.Request, ps httprouter.Params) (int, any, error) {
	var req refreshClientRequest
	if err := decode(w, r, &req, true); err != nil {
		return 0, nil, err
	}
	tok, err := s.rt.RefreshClient(r.Context(), ps.ByName("id"), req.RevokePrevious)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, tokenJSON{Token: tok}, nil
}

func (s *Server) revokeClient(_ http.ResponseWriter, r *http.Request, ps httprouter.Params) (int, any, error) {
	id := ps.ByName("id")
	if err := s.rt.RevokeClient(r.Context(), id); err != nil {
		return 0, nil, err
	}
	return http.StatusOK, goneJSON{ClientID: id, Status: "revoked"}, nil
}

// clientList is the answer of GET /admin/v1/clients; Clients is never
// nil, so that an empty list is [].
type clientList struct {
	Clients []mcpruntime.ClientGrantInfo `json:"clients"`
	// NextCursor, given back as ?cursor=, lists the next page; absent on
	// the last one.
	NextCursor string `json:"nextCursor,omitempty"`
}

// listClients answers one page of client grants, paged as listThreads.
// No token or hash is in it.
func (s *Server) listClients(_ http.ResponseWriter, r *http.Request, _ httprouter.Params) (int, any, error) {
	opts, err := listOptions(r)
	if err != nil {
		return 0, nil, err
	}
	page, err := s.rt.ListClientGrants(r.Context(), opts)
	if err != nil {
		return 0, nil, err
	}
	out := clientList{Clients: page.Grants, NextCursor: page.NextCursor}
	if out.Clients == nil {
		out.Clients = []mcpruntime.ClientGrantInfo{}
	}
	return http.StatusOK, out, nil
}

func (s *Server) getClient(_ http.ResponseWriter, r *http.Request, ps httprouter.Params) (int, any, error) {
	g, err := s.rt.ClientGrant(r.Context(), ps.ByName("id"))
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, g, nil
}

// ---- OAuth ----

type pairingRequest struct {
	Access string `json:"access"`
}

// newPairingCode mints a pairing code that approves one OAuth sign-in
// with its access level (SPEC §5c); the code is shown here only.
func (s *Server) newPairingCode(w http.ResponseWriter, r *http.Request, _ httprouter.Params) (int, any, error) {
	var req pairingRequest
	if err := decode(w, r, &req, true); err != nil {
		return 0, nil, err
	}
	if req.Access == "" {
		req.Access = "read-only"
	}
	pc, err := s.rt.NewPairingCode(r.Context(), req.Access)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusCreated, pc, nil
}

// ---- MCP sessions ----

// storedSession is a session as the store knows it: the endpoint's
// MCPSessionInfo without "busy", which only a live endpoint knows.
type storedSession struct {
	mcpruntime.MCPSessionInfo
	Busy *bool `json:"busy,omitempty"` // always nil: hides MCPSessionInfo.Busy
}

// sessionList is the answer of GET /admin/v1/sessions; Sessions is never
// nil, so that an empty list is [].
type sessionList[S any] struct {
	Sessions []S `json:"sessions"`
}

func (s *Server) listSessions(_ http.ResponseWriter, _ *http.Request, _ httprouter.Params) (int, any, error) {
	if s.opts.MCP != nil {
		return http.StatusOK, sessionList[mcpruntime.MCPSessionInfo]{Sessions: s.opts.MCP.SessionInfos()}, nil
	}
	recs := s.rt.MCPSessions()
	out := make([]storedSession, len(recs))
	for i, rec := range recs {
		out[i].MCPSessionInfo = mcpruntime.MCPSessionInfo{ID: rec.ID, Owner: rec.Owner, Created: rec.Created, LastActive: rec.LastActive}
	}
	return http.StatusOK, sessionList[storedSession]{Sessions: out}, nil
}
