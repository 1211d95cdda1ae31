package mcpruntime

import (
	"encoding/json"
	"slices"
	"time"

	"github.com/agenthost/mcpruntime/internal/principal"
	"github.com/agenthost/mcpruntime/memdb"
)

// Thread is a snapshot of one thread.
type Thread struct {
	ID       string
	Status   string // "active" or "archived"
	Instance string // current provider instance, "" if none yet
	Run      *Run   // active run, nil if none
	Messages []Message
	Created  time.Time
}

// Run is a thread's active run.
type Run struct {
	ID       string
	Instance string
	Started  time.Time
}

// Message is one entry of a thread's message log.
type Message struct {
	Seq      uint64
	Text     string
	Author   string // namespace of the caller that posted it
	Instance string // the caller's provider instance, "" for clients
	At       time.Time
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
	Capabilities  []string
	Reused        bool
}

// SwitchResult is the answer to SwitchProvider.
type SwitchResult struct {
	Previous string // previous current instance
	EndedRun string // run the switch ended, "" if none
}

// Credential is a freshly minted credential (Rotate).
type Credential struct {
	ID            string
	Authorization string // "Bearer <token>", shown once
}

// ClientToken is a freshly issued client-grant token.
type ClientToken struct {
	ClientID string
	Token    string // shown once
}

// Principal is who a token authenticates as (SPEC §2): one type shared by
// every layer, from the credential row to the MCP endpoint.
type Principal = principal.Principal

func threadFromRecord(t *memdb.Thread) Thread {
	out := Thread{ID: t.ID, Status: t.Status, Instance: t.Instance, Created: t.Created}
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

func principalFromRecord(c *memdb.Credential) Principal {
	return Principal{
		Kind:         c.Kind,
		Namespace:    c.Namespace,
		CredentialID: c.ID,
		Thread:       c.Thread,
		Instance:     c.Instance,
		Client:       c.Client,
		Access:       c.Access,
		Capabilities: slices.Clone(c.Capabilities),
		Expires:      c.Expires,
	}
}
