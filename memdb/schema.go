package memdb

import (
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
	IndexStatus         = "status"
	IndexDriver         = "driver"
	IndexInstance       = "instance"
	IndexThread         = "thread"
	IndexThreadInstance = "thread_instance"
	IndexCredential     = "credential"
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
			// id: Thread, every thread actor's reload, ThreadsAfter (the pages of thread_list and the admin listing).
			IndexID: idIndex(),
			// status: ThreadsByStatus (admin listings of active/archived threads).
			IndexStatus: stringIndex(IndexStatus, "Status", false),
		},
	}
}

func instancesTableSchema() *gomemdb.TableSchema {
	return &gomemdb.TableSchema{
		Name: TableInstances,
		Indexes: map[string]*gomemdb.IndexSchema{
			// id: Instance, checked before a thread names its instance.
			IndexID: idIndex(),
			// driver: InstancesByDriver (which instances a driver kind serves).
			IndexDriver: stringIndex(IndexDriver, "Driver", false),
		},
	}
}

func providerSessionsTableSchema() *gomemdb.TableSchema {
	return &gomemdb.TableSchema{
		Name: TableProviderSessions,
		Indexes: map[string]*gomemdb.IndexSchema{
			// id: ProviderSession, release by id.
			IndexID: idIndex(),
			// instance: ProviderSessionsByInstance (multi-thread attach, shutdown).
			IndexInstance: stringIndex(IndexInstance, "Instance", false),
			// thread: ProviderSessionsByThread ("does (T, I) have a live session?",
			// detach, archive).
			IndexThread: {
				Name:         IndexThread,
				AllowMissing: true,
				Indexer:      &gomemdb.StringSliceFieldIndex{Field: "Threads"},
			},
			// credential: ProviderSessionsByCredential ("is this credential still
			// held by another live provider session?" on release).
			IndexCredential: {
				Name:         IndexCredential,
				AllowMissing: true,
				Indexer:      &gomemdb.StringSliceFieldIndex{Field: "Credentials"},
			},
			// state: ProviderSessionsByState (live session listings).
			IndexState: stringIndex(IndexState, "State", false),
		},
	}
}

func credentialsTableSchema() *gomemdb.TableSchema {
	return &gomemdb.TableSchema{
		Name: TableCredentials,
		Indexes: map[string]*gomemdb.IndexSchema{
			// id: Credential, revocation by id.
			IndexID: idIndex(),
			// token_hash: CredentialByTokenHash, the one read of every
			// authentication. Unique: two tokens never share a hash.
			IndexTokenHash: {
				Name:    IndexTokenHash,
				Unique:  true,
				Indexer: &gomemdb.StringFieldIndex{Field: "TokenHash"},
			},
			// thread: CredentialsByThread (archive and delete revoke them all).
			IndexThread: stringIndex(IndexThread, "Thread", true),
			// thread_instance: CredentialsByThreadInstance (reuse, rotate).
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
			// namespace: CredentialsByNamespace (all tokens of a client grant
			// share one namespace; a provider credential's is its own).
			IndexNamespace: stringIndex(IndexNamespace, "Namespace", false),
			// state: CredentialsByState (live credential counts, shutdown).
			IndexState: stringIndex(IndexState, "State", false),
		},
	}
}

func clientGrantsTableSchema() *gomemdb.TableSchema {
	return &gomemdb.TableSchema{
		Name: TableClientGrants,
		Indexes: map[string]*gomemdb.IndexSchema{
			// id: ClientGrant, refresh and revoke by id.
			IndexID: idIndex(),
			// state: ClientGrantsByState (listings, shutdown).
			IndexState: stringIndex(IndexState, "State", false),
		},
	}
}

func mcpSessionsTableSchema() *gomemdb.TableSchema {
	return &gomemdb.TableSchema{
		Name: TableMCPSessions,
		Indexes: map[string]*gomemdb.IndexSchema{
			// id: MCPSession, MCPSessions (operators' listing). The only
			// index: sessions and streams learn of revocations from the
			// liveness monitor, and the transport keeps its sessions by
			// namespace itself (caps, eviction), so an index by owner or by
			// credential would only cost a radix-tree path per session —
			// hundreds of bytes at 100 000 idle sessions.
			IndexID: idIndex(),
		},
	}
}
