package proptest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"pgregory.net/rapid"

	mcpruntime "github.com/agenthost/mcpruntime"
)

// The lifecycle machine's resource traffic (SPEC §5b): reads of the thread
// transcripts and of resources behind an access class or a capability, by
// any principal ever minted, and subscriptions. The promise it holds: a
// principal reads a resource, and the endpoint's CanRead lets a
// subscription deliver to it, exactly when the model says it may read it
// now — a deleted thread's transcript and a refused resource are alike
// unknown — and a refused read is answered as an unknown one.

// The machine's own resources, registered in every iteration.
const (
	resProviderOnly = "test://provider-only" // readAsCaller
	resPostCap      = "test://post-cap"      // read, capability thread.post
	resNone         = "test://none"          // never registered
)

// ensureResources registers the machine's resources on first use, so that
// every machine built on the lifecycle machine's actions (the HTTP and the
// concurrent ones too) has them.
func (s *lifecycleMachine) ensureResources(t *rapid.T) {
	if s.resources {
		return
	}
	s.resources = true
	rt := s.rt
	for uri, class := range map[string]mcpruntime.Access{resProviderOnly: mcpruntime.AccessReadAsCaller, resPostCap: mcpruntime.AccessRead} {
		r := mcpruntime.Resource{Resource: mcp.Resource{URI: uri, Name: uri}, Access: class,
			Handler: func(_ context.Context, read *mcpruntime.ResourceRead) (*mcp.ReadResourceResult, error) {
				return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: read.URI, Text: read.URI}}}, nil
			}}
		if uri == resPostCap {
			r.Capability = "thread.post"
		}
		if err := rt.RegisterResource(r); err != nil {
			t.Fatalf("RegisterResource(%s): %v", uri, err)
		}
	}
}

// modelSub is a subscription the endpoint accepted: who, and what.
type modelSub struct {
	cred *modelCred
	uri  string
}

// resourceURIs are the URIs the actions use: every pool thread's
// transcript and the machine's resources.
func resourceURIs() []string {
	uris := []string{resProviderOnly, resPostCap, resNone}
	for _, id := range threadPool {
		uris = append(uris, mcpruntime.TranscriptURI(id))
	}
	return uris
}

// mayRead is the model's answer: whether c, live, may read uri now.
func (s *lifecycleMachine) mayRead(c *modelCred, uri string) bool { return s.m.mayRead(c, uri) }

// mayRead is whether c, live, may read uri in m (the concurrent machine
// asks it of the states it tries orders on).
func (m *model) mayRead(c *modelCred, uri string) bool {
	switch uri {
	case resProviderOnly:
		return c.kind == kindProvider
	case resPostCap:
		return slices.Contains(c.caps, "thread.post")
	case resNone:
		return false
	}
	for _, id := range threadPool {
		if uri == mcpruntime.TranscriptURI(id) {
			return m.threads[id] != nil
		}
	}
	return false
}

// ReadResource reads a URI as the principal of a token ever minted; a token
// that does not authenticate gets nothing dispatched (the endpoint's 401),
// so only live ones read.
func (s *lifecycleMachine) ReadResource(t *rapid.T) {
	if len(s.m.creds) == 0 {
		t.Skip("no token yet")
	}
	s.ensureResources(t)
	c := pick(t, "reader", s.m.creds)
	if !s.m.live(c) {
		t.Skip("a dead token reads nothing")
	}
	uri := rapid.SampledFrom(resourceURIs()).Draw(t, "uri")
	call := fmt.Sprintf("ReadResource(%s: %s, %s)", c.id, c.describe(), uri)
	p := s.m.principal(c)
	want := s.mayRead(c, uri)
	if got := s.rt.CanRead(p, uri); got != want {
		t.Fatalf("%s: CanRead = %v, want %v", call, got, want)
	}
	res, err := s.rt.ReadResource(s.ctx, p, uri)
	if !want {
		_, unknownErr := s.rt.ReadResource(s.ctx, p, resNone)
		if !errors.Is(err, mcpruntime.ErrResourceNotFound) || strings.ReplaceAll(err.Error(), uri, "URI") != strings.ReplaceAll(unknownErr.Error(), resNone, "URI") {
			t.Fatalf("%s = %v, want the answer of an unknown URI (%v)", call, err, unknownErr)
		}
		return
	}
	if err != nil || len(res.Contents) != 1 {
		t.Fatalf("%s = %+v, %v; want one content", call, res, err)
	}
	for _, id := range threadPool {
		if uri != mcpruntime.TranscriptURI(id) {
			continue
		}
		var tr struct {
			Messages []mcpruntime.Message `json:"messages"`
		}
		if err := json.Unmarshal([]byte(res.Contents[0].Text), &tr); err != nil {
			t.Fatalf("%s: transcript %q: %v", call, res.Contents[0].Text, err)
		}
		if diff := cmp.Diff(s.m.thread(id).Messages, tr.Messages, cmpOpts); diff != "" {
			t.Fatalf("%s: transcript messages (-model +runtime):\n%s", call, diff)
		}
	}
}

// Subscribe subscribes a live principal to a URI, as resources/subscribe
// does: accepted when CanRead says so, and then checked after every action.
func (s *lifecycleMachine) Subscribe(t *rapid.T) {
	if len(s.m.creds) == 0 {
		t.Skip("no token yet")
	}
	s.ensureResources(t)
	c := pick(t, "subscriber", s.m.creds)
	if !s.m.live(c) {
		t.Skip("a dead token subscribes to nothing")
	}
	uri := rapid.SampledFrom(resourceURIs()).Draw(t, "uri")
	if got, want := s.rt.CanRead(s.m.principal(c), uri), s.mayRead(c, uri); got != want {
		t.Fatalf("Subscribe(%s, %s): CanRead = %v, want %v", c.id, uri, got, want)
	} else if got {
		s.subs = append(s.subs, modelSub{cred: c, uri: uri})
	}
}

// checkSubscriptions: a notification for a subscription would be
// delivered (CanRead at delivery) exactly when its subscriber, still live,
// may read the resource now. A dead subscriber's session has ended (the
// HTTP machine's part).
func (s *lifecycleMachine) checkSubscriptions(t *rapid.T) {
	for _, sub := range s.subs {
		if !s.m.live(sub.cred) {
			continue
		}
		if got, want := s.rt.CanRead(s.m.principal(sub.cred), sub.uri), s.mayRead(sub.cred, sub.uri); got != want {
			t.Fatalf("subscription of %s (%s) to %s: CanRead = %v, want %v", sub.cred.id, sub.cred.describe(), sub.uri, got, want)
		}
	}
}
