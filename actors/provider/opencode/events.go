package opencode

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/agenthost/mcpruntime/actors/provider/driver"
)

// maxText bounds the Text of a reported event.
const maxText = 4096

// props is the union of the properties of the events the driver reads.
type props struct {
	SessionID string `json:"sessionID"`
	Status    *struct {
		Type string `json:"type"` // idle, busy, retry
	} `json:"status"` // session.status
	Error *ocError `json:"error"` // session.error
	Info  *struct {
		ID   string `json:"id"`
		Role string `json:"role"`
		Time struct {
			Completed int64 `json:"completed"`
		} `json:"time"`
	} `json:"info"` // message.updated
	Part       *part    `json:"part"`       // message.part.updated
	ID         string   `json:"id"`         // permission.asked, question.asked
	Permission string   `json:"permission"` // permission.asked
	Patterns   []string `json:"patterns"`   // permission.asked
}

// ocError is OpenCode's error object: a name and, mostly, a message.
type ocError struct {
	Name string `json:"name"`
	Data struct {
		Message string `json:"message"`
	} `json:"data"`
}

func (e *ocError) text() string {
	if e == nil {
		return "unknown error"
	}
	switch {
	case e.Data.Message == "":
		return e.Name
	case e.Name == "":
		return e.Data.Message
	}
	return e.Name + ": " + e.Data.Message
}

// part is a message part: text, a tool call with its state, and others
// the driver does not report (reasoning, steps, snapshots, …).
type part struct {
	ID        string `json:"id"`
	SessionID string `json:"sessionID"`
	MessageID string `json:"messageID"`
	Type      string `json:"type"`
	Text      string `json:"text"`
	Synthetic bool   `json:"synthetic"`
	Time      *struct {
		End int64 `json:"end"`
	} `json:"time"`
	Tool  string `json:"tool"`
	State *struct {
		Status string          `json:"status"` // pending, running, completed, error
		Input  json.RawMessage `json:"input"`
		Output string          `json:"output"`
		Error  string          `json:"error"`
	} `json:"state"`
}

// eventLoop reads the server's event stream for as long as the session
// lives, reconnecting when it breaks; connected is closed at the first
// "server.connected". After a reconnection the turn in progress is
// checked against GET /session/status: its end may have been missed.
func (s *session) eventLoop(connected chan<- struct{}) {
	defer s.loops.Done()
	first := true
	backoff := 100 * time.Millisecond
	for {
		err := s.api.subscribe(s.ctx, func(ev event) {
			if ev.Type != "server.connected" {
				s.handle(ev)
				return
			}
			backoff = 100 * time.Millisecond
			if first {
				first = false
				close(connected)
				return
			}
			s.reconcile()
		})
		if s.ctx.Err() != nil {
			return
		}
		s.logger.Warn("opencode event stream ended; reconnecting", "err", err)
		select {
		case <-s.ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// handle translates one event of the stream. Only events of the session's
// own OpenCode session count (not those of the subagent sessions it
// starts); reports are made in the stream's order.
func (s *session) handle(ev event) {
	switch ev.Type {
	case "session.status", "session.idle", "session.error", "message.updated", "message.part.updated",
		"permission.asked", "question.asked":
	case "server.instance.disposed":
		// OpenCode reloaded the project: a live MCP registration is gone.
		select {
		case s.kick <- struct{}{}:
		default:
		}
		return
	default:
		return
	}
	var p props
	if err := json.Unmarshal(ev.Properties, &p); err != nil {
		return
	}
	sid := p.SessionID
	if sid == "" && p.Part != nil {
		sid = p.Part.SessionID
	}
	// A question or a permission request of a subagent's session is
	// answered too: every session of the server is the thread's.
	if sid != s.oc && ev.Type != "permission.asked" && ev.Type != "question.asked" {
		return
	}
	s.logger.Debug("opencode event", "type", ev.Type)
	var (
		out   []driver.Event
		end   *driver.TurnEnd
		after func() // an API call, made once the reports are out
	)
	s.mu.Lock()
	ts := s.turn
	mk := func(kind string) driver.Event {
		e := driver.Event{Thread: s.thread, Kind: kind}
		if ts != nil {
			e.Turn = ts.id
		}
		return e
	}
	start := func() {
		if ts == nil || ts.started {
			return
		}
		ts.started = true
		out = append(out, mk(driver.EventTurnStarted))
		if ts.interrupted {
			// Interrupted before OpenCode began: abort what began now.
			after = func() { s.background(s.abort) }
		}
	}
	switch ev.Type {
	case "session.status":
		switch {
		case p.Status == nil:
		case p.Status.Type == "idle":
			s.idle = true
			end = s.endLocked(ts)
		default: // busy, retry
			s.idle = false
			start()
		}
	case "session.idle":
		s.idle = true
		end = s.endLocked(ts)
	case "session.error":
		start()
		text := p.Error.text()
		if ts != nil {
			if p.Error != nil && p.Error.Name == "MessageAbortedError" {
				ts.aborted = true
			} else if ts.err == "" {
				ts.err = text
			}
		}
		e := mk(driver.EventError)
		e.Text = bound(text)
		out = append(out, e)
		if s.idle {
			// OpenCode went idle before it published the error.
			end = s.endLocked(ts)
		}
	case "message.updated":
		if p.Info == nil || p.Info.ID == "" {
			break
		}
		m, known := s.msgs[p.Info.ID]
		if !known {
			m = message{role: p.Info.Role, turn: ts}
		}
		done := p.Info.Time.Completed > 0
		if ts != nil && m.turn == ts && m.role == "assistant" {
			if !known {
				ts.answers++
			}
			switch {
			case !known && !done:
				ts.open++
			case known && !m.completed && done:
				ts.open--
			}
		}
		m.completed = m.completed || done
		s.msgs[p.Info.ID] = m
	case "message.part.updated":
		if p.Part != nil {
			out = s.partLocked(*p.Part, mk, out)
		}
	case "permission.asked":
		// Nobody is there to answer (as "opencode run" does: reject).
		e := mk(driver.EventError)
		e.Text = bound(fmt.Sprintf("OpenCode asked permission for %s %s: rejected, a provider session has no one to ask", p.Permission, strings.Join(p.Patterns, ", ")))
		out = append(out, e)
		id := p.ID
		after = func() {
			s.background(func(ctx context.Context) error {
				return s.api.do(ctx, http.MethodPost, "/permission/"+url.PathEscape(id)+"/reply", map[string]string{"reply": "reject"}, nil)
			})
		}
	case "question.asked":
		id := p.ID
		after = func() {
			s.background(func(ctx context.Context) error {
				return s.api.do(ctx, http.MethodPost, "/question/"+url.PathEscape(id)+"/reject", nil, nil)
			})
		}
	}
	s.mu.Unlock()
	for _, e := range out {
		s.events.Event(e)
	}
	if end != nil {
		s.events.TurnEnded(*end)
	}
	if after != nil {
		after()
	}
}

// partLocked reports what a message part adds: an assistant's finished
// text; a tool call once it runs (its arguments), and its result. Call
// with s.mu held.
func (s *session) partLocked(p part, mk func(string) driver.Event, out []driver.Event) []driver.Event {
	m, ok := s.msgs[p.MessageID]
	if !ok || m.turn != s.turn || m.role != "assistant" {
		return out // not the current turn's answer
	}
	seen := s.seen[p.ID]
	switch p.Type {
	case "text":
		if seen&seenText != 0 || p.Synthetic || p.Time == nil || p.Time.End == 0 || strings.TrimSpace(p.Text) == "" {
			return out
		}
		s.seen[p.ID] = seen | seenText
		e := mk(driver.EventMessage)
		e.Text = bound(p.Text)
		return append(out, e)
	case "tool":
		if p.State == nil || p.State.Status == "pending" {
			return out
		}
		if seen&seenCall == 0 {
			seen |= seenCall
			e := mk(driver.EventToolCall)
			e.Tool = p.Tool
			if in := p.State.Input; len(in) > 0 && in[0] == '{' {
				e.Data = slices.Clone(in)
			}
			out = append(out, e)
		}
		if seen&seenResult == 0 && (p.State.Status == "completed" || p.State.Status == "error") {
			seen |= seenResult
			e := mk(driver.EventToolResult)
			e.Tool = p.Tool
			if p.State.Status == "error" {
				e.Error, e.Text = true, bound(p.State.Error)
			} else {
				e.Text = bound(p.State.Output)
			}
			out = append(out, e)
		}
		s.seen[p.ID] = seen
	}
	return out
}

// endLocked takes ts out of the session at an idle if it is over (see
// turnState) and returns its end; nil if it is not. Call with s.mu held.
func (s *session) endLocked(ts *turnState) *driver.TurnEnd {
	if ts == nil || s.turn != ts {
		return nil
	}
	if ts.open > 0 || !(ts.started || ts.interrupted) || !(ts.answers > 0 || ts.err != "" || ts.interrupted || ts.aborted) {
		return nil
	}
	return s.takeLocked(ts)
}

// takeLocked takes ts out of the session and returns its end. Call with
// s.mu held.
func (s *session) takeLocked(ts *turnState) *driver.TurnEnd {
	s.turn = nil
	close(ts.ended)
	end := &driver.TurnEnd{Thread: s.thread, Turn: ts.id, Outcome: driver.TurnCompleted}
	switch {
	case ts.interrupted || ts.aborted:
		end.Outcome = driver.TurnInterrupted
	case ts.err != "":
		end.Outcome, end.Error = driver.TurnFailed, bound(ts.err)
	}
	return end
}

// reconcile ends the turn in progress if OpenCode's session is no longer
// busy: the idle may have gone by while the stream was down.
func (s *session) reconcile() {
	ctx, cancel := context.WithTimeout(s.ctx, callTimeout)
	defer cancel()
	var all map[string]struct {
		Type string `json:"type"`
	}
	if err := s.api.do(ctx, http.MethodGet, "/session/status", nil, &all); err != nil {
		return
	}
	if t := all[s.oc].Type; t == "busy" || t == "retry" {
		return
	}
	s.mu.Lock()
	var end *driver.TurnEnd
	if ts := s.turn; ts != nil && (ts.started || ts.interrupted) {
		end = s.takeLocked(ts)
	}
	s.mu.Unlock()
	if end != nil {
		s.events.TurnEnded(*end)
	}
}

// background runs an API call of the driver's own, bounded, logging its
// failure; it does not outlive the session.
func (s *session) background(f func(context.Context) error) {
	s.loops.Add(1)
	go func() {
		defer s.loops.Done()
		ctx, cancel := context.WithTimeout(s.ctx, callTimeout)
		defer cancel()
		if err := f(ctx); err != nil && s.ctx.Err() == nil {
			s.logger.Warn("opencode call", "err", err)
		}
	}()
}

// bound cuts text to maxText bytes, on a character boundary, marked with
// "…".
func bound(text string) string {
	if len(text) <= maxText {
		return text
	}
	cut := maxText - len("…")
	for cut > 0 && !utf8.RuneStart(text[cut]) {
		cut--
	}
	return text[:cut] + "…"
}
