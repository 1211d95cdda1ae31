package mcpruntime

import (
	"time"

	"github.com/agenthost/mcpruntime/internal/credential"
	"github.com/agenthost/mcpruntime/memdb"
	"github.com/agenthost/mcpruntime/transport"
)

// Kinds of Record the runtime derives from its own state and endpoints,
// besides the provider and agent records (journal.go): what a host that
// runs the server standalone learns from the admin event stream (SPEC
// §3.7, §7.2).
const (
	RecordThreadCreated  = "thread.created"  // Thread; Instance when one was chosen
	RecordThreadSwitched = "thread.switched" // Thread, Instance (the new one), From (the old one, "" at the first choice)
	RecordThreadArchived = "thread.archived" // Thread
	RecordThreadDeleted  = "thread.deleted"  // Thread
	RecordThreadPosted   = "thread.posted"   // Thread, Seq, Principal (the author's namespace), Instance (a provider's); never the text
	RecordRunStarted     = "run.started"     // Thread, Run, Instance
	RecordRunEnded       = "run.ended"       // Thread, Run, Instance

	RecordCredentialMinted  = "credential.minted"  // Credential, Thread, Instance
	RecordCredentialRotated = "credential.rotated" // Credential (the new one), From (the one it replaced), Thread, Instance: right after From's credential.revoked (reason rotated); the new one's credential.minted came before
	RecordCredentialRevoked = "credential.revoked" // Credential, Thread, Instance, Reason

	RecordInstanceRegistered = "instance.registered" // Instance, State (its driver kind)
	RecordInstanceRemoved    = "instance.removed"    // Instance

	// A client grant's credential events are "client.<kind>" (kind one of
	// the Event… constants: client.issued, client.refreshed,
	// client.rotated, client.revoked, client.audience_refused,
	// client.pairing_failed, client.authorization_failed), with Client,
	// Credential, Via, Reason and ClientName as the event has them.
	RecordClientPrefix = "client."
	// RecordSignedIn is an OAuth sign-in that completed: the grant it
	// issued (Client, ClientName), journaled right after its client.issued.
	RecordSignedIn = "oauth.signed_in"

	RecordMCPOpened = "mcp.opened" // MCPSession, Principal, Credential, Protocol, ClientName
	RecordMCPClosed = "mcp.closed" // MCPSession, Principal, Reason (deleted, idle, revoked, cap, shutdown, …)
)

// changed is the runtime's hook on the store (memdb.Store.OnChanges): it
// journals what a committed write did to threads, runs, provider
// credentials and instances, in an order fixed per write — the thread's
// creation, its run's end, its switch, its archive or delete, then each
// credential's change as the write made it, then the new run and the new
// messages — so that every node that applies the write journals the same
// sequence. It runs on the writer's goroutine and only appends.
func (r *Runtime) changed(changes []memdb.Change) {
	now := r.cfg.Now()
	var before, after []Record // the thread's records around the credentials'
	var creds []Record
	for _, c := range changes {
		switch c.Table {
		case memdb.TableThreads:
			b, _ := c.Before.(*memdb.Thread)
			a, _ := c.After.(*memdb.Thread)
			before, after = threadRecords(before, after, b, a, now)
		case memdb.TableCredentials:
			b, _ := c.Before.(*memdb.Credential)
			a, _ := c.After.(*memdb.Credential)
			if (a != nil && a.Kind != memdb.KindProvider) || (a == nil && (b == nil || b.Kind != memdb.KindProvider)) {
				continue // a client grant's rows: its credential events say more (client.*)
			}
			switch {
			case a != nil && a.State == memdb.StateLive && (b == nil || b.State != memdb.StateLive):
				creds = append(creds, Record{Time: now, Kind: RecordCredentialMinted, Credential: a.ID, Thread: a.Thread, Instance: a.Instance})
			case b != nil && b.State == memdb.StateLive && (a == nil || a.State != memdb.StateLive):
				reason := credential.ReasonDeleted
				if a != nil {
					reason = a.RevokeReason
				}
				creds = append(creds, Record{Time: now, Kind: RecordCredentialRevoked, Credential: b.ID, Thread: b.Thread, Instance: b.Instance, Reason: reason})
				if reason == credential.ReasonRotated {
					creds = append(creds, r.rotated(b, now))
				}
			}
		case memdb.TableInstances:
			b, _ := c.Before.(*memdb.Instance)
			a, _ := c.After.(*memdb.Instance)
			switch {
			case b == nil && a != nil:
				creds = append(creds, Record{Time: now, Kind: RecordInstanceRegistered, Instance: a.ID, State: a.Driver})
			case b != nil && a == nil:
				creds = append(creds, Record{Time: now, Kind: RecordInstanceRemoved, Instance: b.ID})
			}
		}
	}
	for _, list := range [][]Record{before, creds, after} {
		for _, rec := range list {
			r.journal.append(&rec)
		}
	}
}

// rotated is the record of a rotation, journaled once its old credential
// was revoked (the new one was minted, and journaled, a write before): the
// pair's newest live credential, read from the store the write just
// committed to, replaced old.
func (r *Runtime) rotated(old *memdb.Credential, now time.Time) Record {
	rec := Record{Time: now, Kind: RecordCredentialRotated, Thread: old.Thread, Instance: old.Instance, From: old.ID}
	rows, _ := r.store.Read().CredentialsByThreadInstance(old.Thread, old.Instance)
	var newest *memdb.Credential
	for _, c := range rows {
		if c.State == memdb.StateLive && (newest == nil || c.Issued.After(newest.Issued)) {
			newest = c
		}
	}
	if newest != nil {
		rec.Credential = newest.ID
	}
	return rec
}

// threadRecords adds what one thread row's change says: to before, the
// records that come ahead of the write's credential records; to after,
// those that follow them.
func threadRecords(before, after []Record, b, a *memdb.Thread, now time.Time) ([]Record, []Record) {
	id := ""
	switch {
	case a != nil:
		id = a.ID
	case b != nil:
		id = b.ID
	default:
		return before, after
	}
	if b == nil {
		before = append(before, Record{Time: now, Kind: RecordThreadCreated, Thread: id, Instance: a.Instance})
	}
	if b != nil && b.Run != nil && (a == nil || a.Run == nil || a.Run.ID != b.Run.ID) {
		before = append(before, Record{Time: now, Kind: RecordRunEnded, Thread: id, Run: b.Run.ID, Instance: b.Run.Instance})
	}
	if b != nil && a != nil && a.Instance != b.Instance {
		before = append(before, Record{Time: now, Kind: RecordThreadSwitched, Thread: id, Instance: a.Instance, From: b.Instance})
	}
	if a != nil && a.Status == memdb.ThreadArchived && (b == nil || b.Status != memdb.ThreadArchived) {
		before = append(before, Record{Time: now, Kind: RecordThreadArchived, Thread: id})
	}
	if a == nil {
		before = append(before, Record{Time: now, Kind: RecordThreadDeleted, Thread: id})
		return before, after
	}
	if a.Run != nil && (b == nil || b.Run == nil || b.Run.ID != a.Run.ID) {
		after = append(after, Record{Time: now, Kind: RecordRunStarted, Thread: id, Run: a.Run.ID, Instance: a.Run.Instance})
	}
	var from uint64
	if b != nil {
		from = b.NextSeq
	}
	first := len(a.Messages) // the new messages are the last ones
	for first > 0 && a.Messages[first-1].Seq >= from {
		first--
	}
	for _, m := range a.Messages[first:] {
		after = append(after, Record{Time: now, Kind: RecordThreadPosted, Thread: id, Seq: m.Seq, Principal: m.Author, Instance: m.Instance})
	}
	return before, after
}

// credentialRecords journals a client grant's credential event, and an
// OAuth sign-in's completion after its grant's issue.
func credentialRecords(e *credential.Event, now time.Time) []Record {
	at := e.At
	if at.IsZero() {
		at = now
	}
	rec := Record{Time: at, Kind: RecordClientPrefix + e.Kind, Client: e.Client, Credential: e.Credential,
		Via: e.Via, Reason: e.Reason, ClientName: e.ClientName}
	if e.Kind == credential.EventIssued && e.Via == viaOAuth {
		return []Record{rec, {Time: at, Kind: RecordSignedIn, Client: e.Client, ClientName: e.ClientName}}
	}
	return []Record{rec}
}

// mcpSessionEvent journals an MCP session's start and end (transport
// Host.OnSession).
func (r *Runtime) mcpSessionEvent(e transport.SessionEvent) {
	rec := Record{Time: r.cfg.Now(), MCPSession: e.ID, Principal: e.Namespace}
	if e.Opened {
		rec.Kind, rec.Credential, rec.Protocol, rec.ClientName = RecordMCPOpened, e.Credential, e.ProtocolVersion, e.ClientName
	} else {
		rec.Kind, rec.Reason = RecordMCPClosed, e.Reason
	}
	r.journal.append(&rec)
}
