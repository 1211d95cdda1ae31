package mcpruntime

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/agenthost/mcpruntime/internal/principal"
	"github.com/agenthost/mcpruntime/memdb"
)

// Read-only views of what the runtime holds, for hosts, the admin API and
// tests: snapshots read from the store, lock-free, copied into the types
// below. None of them exposes a way to write (the store has one writer
// per row, the actor that owns it), and none shows a token or its hash.

// InstanceInfo is a registered provider instance. Its driver config is not
// shown: it may hold the driver's secrets.
type InstanceInfo struct {
	ID           string   `json:"id"`
	Driver       string   `json:"driver"`
	Capabilities []string `json:"capabilities"`
}

// ProviderSessionInfo is an open provider session.
type ProviderSessionInfo struct {
	ID          string    `json:"providerSessionId"`
	Instance    string    `json:"instance"`
	MultiThread bool      `json:"multiThread"`
	Threads     []string  `json:"threads"`     // attached now
	Credentials []string  `json:"credentials"` // handed to it, kept across detach
	Opened      time.Time `json:"opened"`
}

// CredentialInfo is a credential: a provider credential of a (thread,
// instance) pair, or a client grant's token; live or revoked.
type CredentialInfo struct {
	ID           string    `json:"id"`
	Kind         string    `json:"kind"` // "provider" or "client"
	Namespace    string    `json:"namespace"`
	Thread       string    `json:"thread,omitempty"`
	Instance     string    `json:"instance,omitempty"`
	Client       string    `json:"client,omitempty"`
	Access       string    `json:"access,omitempty"`
	Capabilities []string  `json:"capabilities,omitempty"`
	Issued       time.Time `json:"issued"`
	LastLive     time.Time `json:"lastLive"`
	Expires      time.Time `json:"expires,omitzero"` // zero: never
	State        string    `json:"state"`            // "live" or "revoked"
	RevokeReason string    `json:"revokeReason,omitempty"`
	Revoked      time.Time `json:"revoked,omitzero"`
}

// MCPSessionRecord is the ownership record of an MCP session, as the store
// holds it.
type MCPSessionRecord struct {
	ID              string    `json:"id"`
	Owner           string    `json:"owner"` // namespace: "cred:<id>" or "client:<id>"
	Credential      string    `json:"credential"`
	ProtocolVersion string    `json:"protocolVersion"`
	ClientName      string    `json:"clientName,omitempty"`
	ClientVersion   string    `json:"clientVersion,omitempty"`
	Created         time.Time `json:"created,omitzero"`
	LastActive      time.Time `json:"lastActive,omitzero"`
}

// Instance returns the provider instance id.
func (r *Runtime) Instance(id string) (InstanceInfo, error) {
	inst, err := r.store.Read().Instance(id)
	if errors.Is(err, memdb.ErrNotFound) {
		return InstanceInfo{}, fmt.Errorf("instance %q: %w", id, ErrUnknownInstance)
	}
	if err != nil {
		return InstanceInfo{}, err
	}
	return instanceInfo(inst), nil
}

// Instances returns every registered provider instance, ordered by id.
func (r *Runtime) Instances() []InstanceInfo {
	insts, _ := r.store.Read().Instances()
	out := make([]InstanceInfo, len(insts))
	for i, inst := range insts {
		out[i] = instanceInfo(inst)
	}
	return out
}

// ProviderSession returns the open provider session id.
func (r *Runtime) ProviderSession(id string) (ProviderSessionInfo, error) {
	s, err := r.store.Read().ProviderSession(id)
	if err != nil || s.State != memdb.SessionOpen {
		return ProviderSessionInfo{}, fmt.Errorf("provider session %q: %w", id, ErrUnknownProviderSession)
	}
	return providerSessionInfo(s), nil
}

// ProviderSessions returns the open provider sessions, ordered by id;
// instance "" means those of every instance.
func (r *Runtime) ProviderSessions(instance string) []ProviderSessionInfo {
	rd := r.store.Read()
	var (
		ss  []*memdb.ProviderSession
		err error
	)
	if instance == "" {
		ss, err = rd.ProviderSessionsByState(memdb.SessionOpen)
	} else {
		ss, err = rd.ProviderSessionsByInstance(instance)
	}
	if err != nil {
		return nil
	}
	out := make([]ProviderSessionInfo, 0, len(ss))
	for _, s := range ss {
		if s.State == memdb.SessionOpen {
			out = append(out, providerSessionInfo(s))
		}
	}
	slices.SortFunc(out, func(a, b ProviderSessionInfo) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// Credentials returns every credential row of thread, of every instance,
// live and revoked (the last Config.RevokedKept revoked ones), ordered by
// id. A deleted thread has none.
func (r *Runtime) Credentials(threadID string) []CredentialInfo {
	cs, _ := r.store.Read().CredentialsByThread(threadID)
	return credentialInfos(cs)
}

// ClientTokens returns every token row of client grant id, live and
// revoked, ordered by id. A revoked grant has none.
func (r *Runtime) ClientTokens(clientID string) []CredentialInfo {
	cs, _ := r.store.Read().CredentialsByNamespace(principal.ClientNamespace(clientID))
	return credentialInfos(cs)
}

// MCPSessions returns the ownership records of the MCP sessions, ordered by
// id. (An endpoint's own listing, with what is in flight, is its
// SessionInfos.)
func (r *Runtime) MCPSessions() []MCPSessionRecord {
	ms, _ := r.store.Read().MCPSessions()
	out := make([]MCPSessionRecord, len(ms))
	for i, m := range ms {
		out[i] = MCPSessionRecord{
			ID: m.ID, Owner: m.Owner, Credential: m.Credential, ProtocolVersion: m.ProtocolVersion,
			ClientName: m.ClientName, ClientVersion: m.ClientVersion, Created: m.Created, LastActive: m.LastActive,
		}
	}
	slices.SortFunc(out, func(a, b MCPSessionRecord) int { return strings.Compare(a.ID, b.ID) })
	return out
}

func instanceInfo(i *memdb.Instance) InstanceInfo {
	return InstanceInfo{ID: i.ID, Driver: i.Driver, Capabilities: nonNil(i.Capabilities)}
}

func providerSessionInfo(s *memdb.ProviderSession) ProviderSessionInfo {
	return ProviderSessionInfo{
		ID: s.ID, Instance: s.Instance, MultiThread: s.MultiThread,
		Threads: nonNil(s.Threads), Credentials: nonNil(s.Credentials), Opened: s.Opened,
	}
}

func credentialInfos(cs []*memdb.Credential) []CredentialInfo {
	out := make([]CredentialInfo, len(cs))
	for i, c := range cs {
		out[i] = CredentialInfo{
			ID: c.ID, Kind: c.Kind, Namespace: c.Namespace, Thread: c.Thread, Instance: c.Instance,
			Client: c.Client, Access: c.Access, Capabilities: slices.Clone(c.Capabilities),
			Issued: c.Issued, LastLive: c.LastLive, Expires: c.Expires,
			State: c.State, RevokeReason: c.RevokeReason, Revoked: c.Revoked,
		}
	}
	slices.SortFunc(out, func(a, b CredentialInfo) int { return strings.Compare(a.ID, b.ID) })
	return out
}
