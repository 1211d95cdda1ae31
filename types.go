package mcpruntime

import (
	"encoding/json"
	"time"

	"github.com/agenthost/mcpruntime/internal/principal"
	"github.com/agenthost/mcpruntime/memdb"
)

// The public types, with the JSON names the built-in tools and the admin
// API encode them with (they encode them as they are, not copies).

// Thread is a snapshot of one thread.
type Thread struct {
	ID       string `json:"id"`
	Status   string `json:"status"`   // "active" or "archived"
	Instance string `json:"instance"` // current provider instance, "" if none yet
	Run      *Run   `json:"run"`      // active run, null if none
	// Home is the node whose actor writes the thread, on several nodes
	// (SPEC §5d): call the runtime there. "" on one node.
	Home string `json:"home,omitempty"`
	// Messages is the message log, oldest first; nil in a listing page
	// (ListThreads), where it is left out of the JSON too.
	Messages []Message `json:"messages,omitzero"`
	Created  time.Time `json:"created"`
}

// Run is a thread's active run.
type Run struct {
	ID       string    `json:"id"`
	Instance string    `json:"instance"`
	Started  time.Time `json:"started"`
}

// Message is one entry of a thread's message log.
type Message struct {
	Seq      uint64    `json:"seq"`
	Text     string    `json:"text"`
	Author   string    `json:"author"`             // namespace of the caller that posted it
	Instance string    `json:"instance,omitempty"` // the caller's provider instance, "" for clients
	At       time.Time `json:"at"`
}

// ThreadOptions are the optional settings of CreateThread.
type ThreadOptions struct {
	// Instance is the thread's initial provider instance. Empty: chosen by
	// the first provider session opened on the thread.
	Instance string
}

// InstanceSpec describes a provider instance to register.
type InstanceSpec struct {
	Driver       string          // driver kind, e.g. "inproc"
	Config       json.RawMessage // the driver's own configuration
	Capabilities []string        // given to every credential minted for the instance
}

// ProviderSession is the answer to OpenProviderSession.
type ProviderSession struct {
	ID           string
	CredentialID string
	Endpoint     string
	// Authorization is "Bearer <token>" when the call minted the
	// credential, "" when it reused one: a token is shown once.
	Authorization string
	Capabilities  []string // never nil
	Reused        bool
}

// SwitchResult is the answer to SwitchProvider.
type SwitchResult struct {
	Previous string // previous current instance
	EndedRun string // run the switch ended, "" if none
}

// Credential is a freshly minted credential (Rotate).
type Credential struct {
	ID            string `json:"credentialId"`
	Authorization string `json:"authorization"` // "Bearer <token>", shown once
}

// ClientToken is a freshly issued client-grant token.
type ClientToken struct {
	ClientID string `json:"clientId"`
	Token    string `json:"token"` // shown once
}

// Principal is who a token authenticates as (SPEC §2): built from the
// credential row the token resolved to, never from what a request claims.
// It is the one principal type of every layer (internal/principal). A
// handler reads its fields:
//
//   - Kind string: "provider" (a provider credential, scoped to a thread
//     and an instance) or "client" (a client grant's token).
//   - Namespace string: "cred:<CredentialID>" or "client:<Client>"; what
//     the caller owns (MCP sessions, listings) is keyed by it.
//   - CredentialID string: the credential row the token resolved to.
//   - Thread, Instance string: the provider credential's scope; "" for a
//     client.
//   - Client string: the client grant's id; "" for a provider.
//   - Access string: a client grant's "read-only" or "read-write"; "" for
//     a provider.
//   - Audience string: the resource an OAuth-issued token is bound to
//     (RFC 8707); "" for any.
//   - Capabilities []string: fixed when the credential was minted
//     (InstanceSpec.Capabilities for a provider).
//   - Expires time.Time: when the token stops authenticating; zero for
//     never.
//
// Provider() reports whether Kind is "provider". JSON names: kind,
// namespace, credentialId, thread, instance, client, access, audience,
// capabilities, expires.
type Principal = principal.Principal

func threadFromRecord(t *memdb.Thread) Thread {
	out := Thread{ID: t.ID, Status: t.Status, Instance: t.Instance, Home: t.Home, Created: t.Created}
	if t.Run != nil {
		out.Run = &Run{ID: t.Run.ID, Instance: t.Run.Instance, Started: t.Run.Started}
	}
	out.Messages = make([]Message, len(t.Messages))
	for i, m := range t.Messages {
		out.Messages[i] = messageFromRecord(m)
	}
	return out
}

func messageFromRecord(m memdb.Message) Message {
	return Message{Seq: m.Seq, Text: m.Text, Author: m.Author, Instance: m.Instance, At: m.At}
}
