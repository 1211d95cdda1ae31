package memdb

import (
	"fmt"

	gomemdb "github.com/hashicorp/go-memdb"
)

// Table names.
const (
	TableThreads          = "threads"
	TableInstances        = "instances"
	TableProviderSessions = "provider_sessions"
	TableCredentials      = "credentials"
	TableClientGrants     = "client_grants"
	TableMCPSessions      = "mcp_sessions"
)

// Index names. Not every table has every index; see the table functions.
const (
	IndexID             = "id"
	IndexInstance       = "instance"
	IndexThread         = "thread"
	IndexThreadInstance = "thread_instance"
	IndexState          = "state"
	IndexTokenHash      = "token_hash"
	IndexNamespace      = "namespace"
)

// Schema returns the database schema. It is a function, not a variable, so
// no caller can change the schema the store was built with.
func Schema() *gomemdb.DBSchema {
	return &gomemdb.DBSchema{
		Tables: map[string]*gomemdb.TableSchema{
			TableThreads:          threadsTableSchema(),
			TableInstances:        instancesTableSchema(),
			TableProviderSessions: providerSessionsTableSchema(),
			TableCredentials:      credentialsTableSchema(),
			TableClientGrants:     clientGrantsTableSchema(),
			TableMCPSessions:      mcpSessionsTableSchema(),
			tableRevisions:        revisionsTableSchema(),
		},
	}
}

func idIndex() *gomemdb.IndexSchema {
	return &gomemdb.IndexSchema{
		Name:    IndexID,
		Unique:  true,
		Indexer: &gomemdb.StringFieldIndex{Field: "ID"},
	}
}

func stringIndex(name, field string, allowMissing bool) *gomemdb.IndexSchema {
	return &gomemdb.IndexSchema{
		Name:         name,
		AllowMissing: allowMissing,
		Indexer:      &gomemdb.StringFieldIndex{Field: field},
	}
}

func threadsTableSchema() *gomemdb.TableSchema {
	return &gomemdb.TableSchema{
		Name: TableThreads,
		Indexes: map[string]*gomemdb.IndexSchema{
			// id: Thread (every thread actor's reload, Runtime.Thread),
			// Threads (the thread actors the runtime starts), ThreadsAfter
			// (the pages of thread_list and the admin listing).
			IndexID: idIndex(),
		},
	}
}

func instancesTableSchema() *gomemdb.TableSchema {
	return &gomemdb.TableSchema{
		Name: TableInstances,
		Indexes: map[string]*gomemdb.IndexSchema{
			// id: Instance (checked before a thread names its instance),
			// Instances (a thread detaching from every instance, the views).
			IndexID: idIndex(),
		},
	}
}

func providerSessionsTableSchema() *gomemdb.TableSchema {
	return &gomemdb.TableSchema{
		Name: TableProviderSessions,
		Indexes: map[string]*gomemdb.IndexSchema{
			// id: ProviderSession (Runtime.ReleaseProviderSession finds the
			// instance of a session, the ProviderSession view).
			IndexID: idIndex(),
			// instance: ProviderSessionsByInstance (an instance actor's
			// sessions on restart, the ProviderSessions view of one instance).
			IndexInstance: stringIndex(IndexInstance, "Instance", false),
			// state: ProviderSessionsByState (Stats.ProviderSessions, the
			// ProviderSessions view of every instance).
			IndexState: stringIndex(IndexState, "State", false),
		},
	}
}

func credentialsTableSchema() *gomemdb.TableSchema {
	return &gomemdb.TableSchema{
		Name: TableCredentials,
		Indexes: map[string]*gomemdb.IndexSchema{
			// id: Credential (revocation by id, the live-caller check, the
			// endpoint's dispatch-time recheck).
			IndexID: idIndex(),
			// token_hash: CredentialByTokenHash, the one read of every
			// authentication. Unique: two tokens never share a hash.
			IndexTokenHash: {
				Name:    IndexTokenHash,
				Unique:  true,
				Indexer: &gomemdb.StringFieldIndex{Field: "TokenHash"},
			},
			// thread: CredentialsByThread (archive and delete revoke them all,
			// turn start slides them, the Credentials view).
			IndexThread: stringIndex(IndexThread, "Thread", true),
			// thread_instance: CredentialsByThreadInstance (open and rotate
			// find the pair's live credential and revoke its older ones).
			IndexThreadInstance: {
				Name:         IndexThreadInstance,
				AllowMissing: true,
				Indexer: &gomemdb.CompoundIndex{
					Indexes: []gomemdb.Indexer{
						&gomemdb.StringFieldIndex{Field: "Thread"},
						&gomemdb.StringFieldIndex{Field: "Instance"},
					},
				},
			},
			// namespace: CredentialsByNamespace (a client grant's tokens, which
			// share one namespace: refresh, revoke, NamespaceLive, the
			// ClientTokens view).
			IndexNamespace: stringIndex(IndexNamespace, "Namespace", false),
			// state: CountCredentialsByState (Stats.LiveCredentials).
			IndexState: stringIndex(IndexState, "State", false),
		},
	}
}

func clientGrantsTableSchema() *gomemdb.TableSchema {
	return &gomemdb.TableSchema{
		Name: TableClientGrants,
		Indexes: map[string]*gomemdb.IndexSchema{
			// id: ClientGrant (a grant actor's GetGrant, and its start, which
			// finds the row a restart left).
			IndexID: idIndex(),
		},
	}
}

func mcpSessionsTableSchema() *gomemdb.TableSchema {
	return &gomemdb.TableSchema{
		Name: TableMCPSessions,
		Indexes: map[string]*gomemdb.IndexSchema{
			// id: MCPSessions (the MCPSessions view, ordered by id) and the
			// session actor's delete by id. The only index: sessions and
			// streams learn of revocations from the liveness monitor, and
			// the session table (actors/session) keeps its sessions by
			// namespace itself (caps, eviction), so an index by owner or by
			// credential would only cost a radix-tree path per session —
			// hundreds of bytes at 100 000 idle sessions.
			// Typed rather than by reflection: the table is written twice
			// per MCP session, on the hot path of session churn.
			IndexID: {Name: IndexID, Unique: true, Indexer: mcpSessionIDIndex{}},
		},
	}
}

// mcpSessionIDIndex indexes an MCPSession by ID, with the keys
// gomemdb.StringFieldIndex{Field: "ID"} makes (the ID and a NUL; an empty
// ID is missing), without its reflection (TestMCPSessionIDIndex holds the
// two equal).
type mcpSessionIDIndex struct{}

func (mcpSessionIDIndex) FromObject(obj any) (bool, []byte, error) {
	m, ok := obj.(*MCPSession)
	if !ok {
		return false, nil, fmt.Errorf("mcp_sessions id index: %T is not *MCPSession", obj)
	}
	if m.ID == "" {
		return false, nil, nil
	}
	return true, nulTerminated(m.ID), nil
}

func (mcpSessionIDIndex) FromArgs(args ...any) ([]byte, error) {
	if len(args) != 1 {
		return nil, fmt.Errorf("must provide only a single argument")
	}
	id, ok := args[0].(string)
	if !ok {
		return nil, fmt.Errorf("argument must be a string: %#v", args[0])
	}
	return nulTerminated(id), nil
}

// nulTerminated returns s and a NUL in one allocation.
func nulTerminated(s string) []byte {
	b := make([]byte, len(s)+1)
	copy(b, s)
	return b
}
