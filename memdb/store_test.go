package memdb

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// t0 is the fixed base time of every fixture.
var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// --- fixtures ---------------------------------------------------------------

func threadFixtures() map[string]*Thread {
	return map[string]*Thread{
		"t1": {ID: "t1", Status: ThreadActive, Instance: "i1", Created: t0},
		"t2": {ID: "t2", Status: ThreadArchived, Instance: "i1", Created: t0.Add(time.Minute)},
		"t3": {ID: "t3", Status: ThreadActive, Created: t0.Add(2 * time.Minute)},
		"t4": {
			ID: "t4", Status: ThreadActive, Instance: "i2",
			Run: &Run{ID: "r1", Instance: "i2", Started: t0.Add(4 * time.Minute)},
			Messages: []Message{
				{Seq: 1, Text: "hello", Author: "client:g1", At: t0.Add(3 * time.Minute)},
				{Seq: 2, Text: "hi", Author: "cred:c1", Instance: "i2", At: t0.Add(5 * time.Minute)},
			},
			NextSeq: 3,
			Created: t0.Add(3 * time.Minute),
		},
		"t5": {ID: "t5", Status: ThreadArchived, Created: t0.Add(6 * time.Minute)},
	}
}

func instanceFixtures() map[string]*Instance {
	return map[string]*Instance{
		"i1": {ID: "i1", Driver: "stdio", Config: json.RawMessage(`{"cmd":"a"}`), Capabilities: []string{"thread.read", "thread.post"}, Created: t0},
		"i2": {ID: "i2", Driver: "http", Config: json.RawMessage(`{"url":"http://x"}`), Capabilities: []string{"thread.read"}, Created: t0},
		"i3": {ID: "i3", Driver: "stdio", Created: t0},
		"i4": {ID: "i4", Driver: "docker", Created: t0},
	}
}

func providerSessionFixtures() map[string]*ProviderSession {
	return map[string]*ProviderSession{
		"ps1": {ID: "ps1", Instance: "i1", MultiThread: true, Threads: []string{"t1", "t2"}, Credentials: []string{"c1", "c4"}, State: SessionOpen, Opened: t0},
		"ps2": {ID: "ps2", Instance: "i1", Threads: []string{"t3"}, Credentials: []string{"c3"}, State: SessionClosed, Opened: t0, Closed: t0.Add(time.Hour), CloseReason: "exit"},
		"ps3": {ID: "ps3", Instance: "i2", State: SessionOpen, Opened: t0},
		"ps4": {ID: "ps4", Instance: "i2", Threads: []string{"t1"}, Credentials: []string{"c1"}, State: SessionOpen, Opened: t0},
		// Detached: no threads any more, but it keeps the credentials it was handed.
		"ps5": {ID: "ps5", Instance: "i3", Credentials: []string{"c2"}, State: SessionOpen, Opened: t0},
	}
}

func credentialFixtures() map[string]*Credential {
	return map[string]*Credential{
		// Provider credentials.
		"c1": {ID: "c1", TokenHash: "h1", Kind: KindProvider, Namespace: "cred:c1", Thread: "t1", Instance: "i1", Capabilities: []string{"thread.read", "thread.post"}, Issued: t0, LastLive: t0, State: StateLive},
		"c2": {ID: "c2", TokenHash: "h2", Kind: KindProvider, Namespace: "cred:c2", Thread: "t1", Instance: "i2", Issued: t0, State: StateRevoked, RevokeReason: "detach", Revoked: t0.Add(time.Hour)},
		"c3": {ID: "c3", TokenHash: "h3", Kind: KindProvider, Namespace: "cred:c3", Thread: "t1", Instance: "i1", Issued: t0.Add(time.Minute), Expires: t0.Add(time.Hour), State: StateLive},
		"c4": {ID: "c4", TokenHash: "h4", Kind: KindProvider, Namespace: "cred:c4", Thread: "t2", Instance: "i1", Issued: t0, State: StateLive},
		// Client tokens: no thread, no instance.
		"k1": {ID: "k1", TokenHash: "h5", Kind: KindClient, Namespace: "client:g1", Client: "g1", Access: AccessReadOnly, Issued: t0, State: StateLive},
		"k2": {ID: "k2", TokenHash: "h6", Kind: KindClient, Namespace: "client:g1", Client: "g1", Access: AccessReadOnly, Issued: t0, State: StateRevoked},
		"k3": {ID: "k3", TokenHash: "h7", Kind: KindClient, Namespace: "client:g2", Client: "g2", Access: AccessReadWrite, Issued: t0, State: StateLive},
	}
}

func clientGrantFixtures() map[string]*ClientGrant {
	return map[string]*ClientGrant{
		"g1": {ID: "g1", Label: "laptop", Access: AccessReadOnly, State: StateLive, Created: t0},
		"g2": {ID: "g2", Label: "ci", Access: AccessReadWrite, State: StateLive, Created: t0},
		"g3": {ID: "g3", Label: "old", Access: AccessReadOnly, State: StateRevoked, Created: t0},
	}
}

func mcpSessionFixtures() map[string]*MCPSession {
	return map[string]*MCPSession{
		"m1": {ID: "m1", Owner: "cred:c1", Credential: "c1", ProtocolVersion: "2025-06-18", ClientName: "agent", Created: t0, LastActive: t0},
		"m2": {ID: "m2", Owner: "client:g1", Credential: "k1", ProtocolVersion: "2025-06-18", Created: t0, LastActive: t0},
		"m3": {ID: "m3", Owner: "client:g1", Credential: "k2", Created: t0, LastActive: t0},
		"m4": {ID: "m4", Owner: "cred:c1", Credential: "c1", Created: t0, LastActive: t0},
		"m5": {ID: "m5", Owner: "client:g2", Credential: "k3", Created: t0, LastActive: t0},
	}
}

// --- helpers ----------------------------------------------------------------

func newStore(t *testing.T) *Store {
	t.Helper()
	s, err := New()
	if err != nil {
		t.Fatalf("New() = %v, want nil error", err)
	}
	return s
}

func mustWrite(t *testing.T, s *Store, fn func(w *Writer) error) {
	t.Helper()
	if err := s.Write(fn); err != nil {
		t.Fatalf("Store.Write = %v, want nil", err)
	}
}

// putAll writes every record of m in one transaction, in key order.
func putAll[T any](t *testing.T, s *Store, m map[string]*T, put func(w *Writer, rec *T) error) {
	t.Helper()
	mustWrite(t, s, func(w *Writer) error {
		for _, k := range sortedKeys(m) {
			if err := put(w, m[k]); err != nil {
				return fmt.Errorf("put %s: %w", k, err)
			}
		}
		return nil
	})
}

// pick returns the fixtures named by ids, in that order; nil for none.
func pick[T any](m map[string]*T, ids ...string) []*T {
	var out []*T
	for _, id := range ids {
		r, ok := m[id]
		if !ok {
			panic("no fixture " + id)
		}
		out = append(out, r)
	}
	return out
}

// cmpOpts treats nil and empty slices alike: an empty query result may be
// either.
var cmpOpts = []cmp.Option{cmpopts.EquateEmpty()}

func seedThreads(t *testing.T, s *Store) map[string]*Thread {
	t.Helper()
	m := threadFixtures()
	putAll(t, s, m, (*Writer).PutThread)
	return m
}

func seedInstances(t *testing.T, s *Store) map[string]*Instance {
	t.Helper()
	m := instanceFixtures()
	putAll(t, s, m, (*Writer).PutInstance)
	return m
}

func seedProviderSessions(t *testing.T, s *Store) map[string]*ProviderSession {
	t.Helper()
	m := providerSessionFixtures()
	putAll(t, s, m, (*Writer).PutProviderSession)
	return m
}

func seedCredentials(t *testing.T, s *Store) map[string]*Credential {
	t.Helper()
	m := credentialFixtures()
	putAll(t, s, m, (*Writer).PutCredential)
	return m
}

func seedClientGrants(t *testing.T, s *Store) map[string]*ClientGrant {
	t.Helper()
	m := clientGrantFixtures()
	putAll(t, s, m, (*Writer).PutClientGrant)
	return m
}

func seedMCPSessions(t *testing.T, s *Store) map[string]*MCPSession {
	t.Helper()
	m := mcpSessionFixtures()
	putAll(t, s, m, (*Writer).PutMCPSession)
	return m
}

// seedAll fills every table, so each query also proves it ignores the other
// tables.
func seedAll(t *testing.T, s *Store) {
	t.Helper()
	seedThreads(t, s)
	seedInstances(t, s)
	seedProviderSessions(t, s)
	seedCredentials(t, s)
	seedClientGrants(t, s)
	seedMCPSessions(t, s)
}

// checkByID runs the by-id read of one table for every fixture and for ids
// that do not exist.
func checkByID[T any](t *testing.T, method string, all map[string]*T, read func(id string) (*T, error)) {
	t.Helper()
	type tc struct {
		name string
		id   string
		want *T
	}
	var tests []tc
	for _, id := range sortedKeys(all) {
		tests = append(tests, tc{name: id, id: id, want: all[id]})
	}
	tests = append(tests,
		tc{name: "missing", id: "nope"},
		tc{name: "empty id", id: ""},
		tc{name: "prefix of an id", id: sortedKeys(all)[0][:1]},
	)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := read(tt.id)
			if tt.want == nil {
				if !errors.Is(err, ErrNotFound) || got != nil {
					t.Fatalf("%s(%q) = %v, %v; want nil, ErrNotFound", method, tt.id, got, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("%s(%q) = %v, want nil error", method, tt.id, err)
			}
			if diff := cmp.Diff(tt.want, got, cmpOpts...); diff != "" {
				t.Errorf("%s(%q) mismatch (-want +got):\n%s", method, tt.id, diff)
			}
		})
	}
}

// listCase is one query of a listing index and the fixtures it must return,
// in order.
type listCase struct {
	name string
	arg  string
	want []string
}

func checkList[T any](t *testing.T, method string, all map[string]*T, tests []listCase, read func(arg string) ([]*T, error)) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := read(tt.arg)
			if err != nil {
				t.Fatalf("%s(%q) = %v, want nil error", method, tt.arg, err)
			}
			if diff := cmp.Diff(pick(all, tt.want...), got, cmpOpts...); diff != "" {
				t.Errorf("%s(%q) mismatch (-want +got):\n%s", method, tt.arg, diff)
			}
		})
	}
}

// --- threads ----------------------------------------------------------------

func TestThreadByID(t *testing.T) {
	s := newStore(t)
	seedAll(t, s)
	all := threadFixtures()
	checkByID(t, "Thread", all, s.Read().Thread)

	got, err := s.Read().Threads()
	if err != nil {
		t.Fatalf("Threads() = %v, want nil error", err)
	}
	if diff := cmp.Diff(pick(all, "t1", "t2", "t3", "t4", "t5"), got, cmpOpts...); diff != "" {
		t.Errorf("Threads() mismatch (-want +got):\n%s", diff)
	}
}

func TestThreadsAfter(t *testing.T) {
	s := newStore(t)
	seedAll(t, s)
	all := threadFixtures()
	for _, tt := range []struct {
		name  string
		after string
		limit int
		want  []string
	}{
		{name: "first page", after: "", limit: 2, want: []string{"t1", "t2"}},
		{name: "next page", after: "t2", limit: 2, want: []string{"t3", "t4"}},
		{name: "last page", after: "t4", limit: 2, want: []string{"t5"}},
		{name: "after the last", after: "t5", limit: 2},
		{name: "after a deleted or unknown id", after: "t20", limit: 2, want: []string{"t3", "t4"}},
		{name: "a prefix does not match ids it prefixes", after: "t", limit: 1, want: []string{"t1"}},
		{name: "everything", after: "", limit: 10, want: []string{"t1", "t2", "t3", "t4", "t5"}},
		{name: "limit zero", after: "", limit: 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := s.Read().ThreadsAfter(tt.after, tt.limit)
			if err != nil {
				t.Fatalf("ThreadsAfter(%q, %d) = %v", tt.after, tt.limit, err)
			}
			if diff := cmp.Diff(pick(all, tt.want...), got, cmpOpts...); diff != "" {
				t.Errorf("ThreadsAfter(%q, %d) mismatch (-want +got):\n%s", tt.after, tt.limit, diff)
			}
		})
	}
}

// --- instances --------------------------------------------------------------

func TestInstanceByID(t *testing.T) {
	s := newStore(t)
	seedAll(t, s)
	all := instanceFixtures()
	checkByID(t, "Instance", all, s.Read().Instance)

	got, err := s.Read().Instances()
	if err != nil {
		t.Fatalf("Instances() = %v, want nil error", err)
	}
	if diff := cmp.Diff(pick(all, "i1", "i2", "i3", "i4"), got, cmpOpts...); diff != "" {
		t.Errorf("Instances() mismatch (-want +got):\n%s", diff)
	}
}

// --- provider sessions ------------------------------------------------------

func TestProviderSessionByID(t *testing.T) {
	s := newStore(t)
	seedAll(t, s)
	checkByID(t, "ProviderSession", providerSessionFixtures(), s.Read().ProviderSession)
}

func TestProviderSessionsByInstance(t *testing.T) {
	s := newStore(t)
	seedAll(t, s)
	all := providerSessionFixtures()
	checkList(t, "ProviderSessionsByInstance", all, []listCase{
		{name: "i1", arg: "i1", want: []string{"ps1", "ps2"}},
		{name: "i2", arg: "i2", want: []string{"ps3", "ps4"}},
		{name: "i3", arg: "i3", want: []string{"ps5"}},
		{name: "instance without sessions", arg: "i4"},
		{name: "empty instance", arg: ""},
	}, s.Read().ProviderSessionsByInstance)
}

func TestProviderSessionsByState(t *testing.T) {
	s := newStore(t)
	seedAll(t, s)
	all := providerSessionFixtures()
	checkList(t, "ProviderSessionsByState", all, []listCase{
		{name: "open", arg: SessionOpen, want: []string{"ps1", "ps3", "ps4", "ps5"}},
		{name: "closed", arg: SessionClosed, want: []string{"ps2"}},
		{name: "credential state is not a session state", arg: StateLive},
		{name: "empty state", arg: ""},
	}, s.Read().ProviderSessionsByState)
}

// --- credentials ------------------------------------------------------------

func TestCredentialByID(t *testing.T) {
	s := newStore(t)
	seedAll(t, s)
	checkByID(t, "Credential", credentialFixtures(), s.Read().Credential)
}

func TestCredentialByTokenHash(t *testing.T) {
	s := newStore(t)
	seedAll(t, s)
	all := credentialFixtures()
	tests := []struct {
		name string
		hash string
		want string // credential id; "" for ErrNotFound
	}{
		{name: "provider credential", hash: "h1", want: "c1"},
		{name: "revoked provider credential", hash: "h2", want: "c2"},
		{name: "client token", hash: "h5", want: "k1"},
		{name: "revoked client token", hash: "h6", want: "k2"},
		{name: "unknown hash", hash: "h9"},
		{name: "empty hash", hash: ""},
		{name: "prefix of a hash", hash: "h"},
		{name: "credential id is not a hash", hash: "c1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := s.Read().CredentialByTokenHash(tt.hash)
			if tt.want == "" {
				if !errors.Is(err, ErrNotFound) || got != nil {
					t.Fatalf("CredentialByTokenHash(%q) = %v, %v; want nil, ErrNotFound", tt.hash, got, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("CredentialByTokenHash(%q) = %v, want nil error", tt.hash, err)
			}
			if diff := cmp.Diff(all[tt.want], got, cmpOpts...); diff != "" {
				t.Errorf("CredentialByTokenHash(%q) mismatch (-want +got):\n%s", tt.hash, diff)
			}
		})
	}
}

func TestCredentialsByThread(t *testing.T) {
	s := newStore(t)
	seedAll(t, s)
	all := credentialFixtures()
	checkList(t, "CredentialsByThread", all, []listCase{
		{name: "thread with credentials on two instances, any state", arg: "t1", want: []string{"c1", "c2", "c3"}},
		{name: "thread with one credential", arg: "t2", want: []string{"c4"}},
		{name: "thread without credentials", arg: "t3"},
		// Client tokens have no thread and must never show up here.
		{name: "empty thread excludes client tokens", arg: ""},
		{name: "client id is not a thread", arg: "g1"},
	}, s.Read().CredentialsByThread)
}

func TestCredentialsByThreadInstance(t *testing.T) {
	s := newStore(t)
	seedAll(t, s)
	all := credentialFixtures()
	tests := []struct {
		name     string
		thread   string
		instance string
		want     []string
	}{
		{name: "pair with a rotated credential", thread: "t1", instance: "i1", want: []string{"c1", "c3"}},
		{name: "same thread, other instance", thread: "t1", instance: "i2", want: []string{"c2"}},
		{name: "other thread, same instance", thread: "t2", instance: "i1", want: []string{"c4"}},
		{name: "pair without credentials", thread: "t2", instance: "i2"},
		{name: "thread without credentials", thread: "t3", instance: "i1"},
		{name: "swapped arguments", thread: "i1", instance: "t1"},
		// Client tokens have empty Thread and Instance and must never match.
		{name: "empty pair excludes client tokens", thread: "", instance: ""},
		{name: "empty instance", thread: "t1", instance: ""},
		{name: "empty thread", thread: "", instance: "i1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := s.Read().CredentialsByThreadInstance(tt.thread, tt.instance)
			if err != nil {
				t.Fatalf("CredentialsByThreadInstance(%q, %q) = %v, want nil error", tt.thread, tt.instance, err)
			}
			if diff := cmp.Diff(pick(all, tt.want...), got, cmpOpts...); diff != "" {
				t.Errorf("CredentialsByThreadInstance(%q, %q) mismatch (-want +got):\n%s", tt.thread, tt.instance, diff)
			}
		})
	}
}

func TestCredentialsByNamespace(t *testing.T) {
	s := newStore(t)
	seedAll(t, s)
	all := credentialFixtures()
	checkList(t, "CredentialsByNamespace", all, []listCase{
		{name: "client grant with two tokens", arg: "client:g1", want: []string{"k1", "k2"}},
		{name: "client grant with one token", arg: "client:g2", want: []string{"k3"}},
		{name: "provider credential's own namespace", arg: "cred:c1", want: []string{"c1"}},
		{name: "revoked provider credential", arg: "cred:c2", want: []string{"c2"}},
		{name: "unknown namespace", arg: "client:g3"},
		{name: "bare client id", arg: "g1"},
		{name: "empty namespace", arg: ""},
	}, s.Read().CredentialsByNamespace)
}

func TestCountCredentialsByState(t *testing.T) {
	s := newStore(t)
	seedAll(t, s)
	tests := []struct {
		name  string
		state string
		want  int
	}{
		{name: "live", state: StateLive, want: 5},
		{name: "revoked", state: StateRevoked, want: 2},
		{name: "session state is not a credential state", state: SessionOpen, want: 0},
		{name: "empty state", state: "", want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := s.Read().CountCredentialsByState(tt.state)
			if err != nil {
				t.Fatalf("CountCredentialsByState(%q) = %v, want nil error", tt.state, err)
			}
			if got != tt.want {
				t.Errorf("CountCredentialsByState(%q) = %d, want %d", tt.state, got, tt.want)
			}
		})
	}

	// Revoking a credential moves it from one count to the other.
	c1 := credentialFixtures()["c1"]
	c1.State, c1.Revoked, c1.RevokeReason = StateRevoked, t0.Add(time.Hour), "archive"
	mustWrite(t, s, func(w *Writer) error { return w.PutCredential(c1) })
	for state, want := range map[string]int{StateLive: 4, StateRevoked: 3} {
		got, err := s.Read().CountCredentialsByState(state)
		if err != nil || got != want {
			t.Errorf("after revoke: CountCredentialsByState(%q) = %d, %v; want %d, nil", state, got, err, want)
		}
	}
}

// --- client grants ----------------------------------------------------------

func TestClientGrantByID(t *testing.T) {
	s := newStore(t)
	seedAll(t, s)
	checkByID(t, "ClientGrant", clientGrantFixtures(), s.Read().ClientGrant)
}

// --- MCP sessions -----------------------------------------------------------

func TestMCPSessionsListing(t *testing.T) {
	s := newStore(t)
	seedAll(t, s)
	all := mcpSessionFixtures()
	got, err := s.Read().MCPSessions()
	if err != nil {
		t.Fatalf("MCPSessions() = %v, want nil error", err)
	}
	if diff := cmp.Diff(pick(all, "m1", "m2", "m3", "m4", "m5"), got, cmpOpts...); diff != "" {
		t.Errorf("MCPSessions() mismatch (-want +got):\n%s", diff)
	}

	mustWrite(t, s, func(w *Writer) error { return w.DeleteMCPSession("m3") })
	got, err = s.Read().MCPSessions()
	if err != nil {
		t.Fatalf("MCPSessions() after delete = %v, want nil error", err)
	}
	if diff := cmp.Diff(pick(all, "m1", "m2", "m4", "m5"), got, cmpOpts...); diff != "" {
		t.Errorf("MCPSessions() after delete mismatch (-want +got):\n%s", diff)
	}
}

func TestMCPSessions(t *testing.T) {
	s := newStore(t)
	got, err := s.Read().MCPSessions()
	if err != nil || len(got) != 0 {
		t.Fatalf("MCPSessions() on an empty store = %v, %v; want empty, nil", got, err)
	}
	seedThreads(t, s) // other tables do not leak into the listing
	all := seedMCPSessions(t, s)
	got, err = s.Read().MCPSessions()
	if err != nil {
		t.Fatalf("MCPSessions() = %v, want nil error", err)
	}
	if diff := cmp.Diff(pick(all, "m1", "m2", "m3", "m4", "m5"), got, cmpOpts...); diff != "" {
		t.Errorf("MCPSessions() mismatch (-want +got):\n%s", diff)
	}
}

// --- general store behaviour ------------------------------------------------

func TestReadMissingReturnsErrNotFound(t *testing.T) {
	s := newStore(t)
	seedAll(t, s)
	tests := []struct {
		name string
		// read returns whether the record was nil, and the error.
		read func(r *Reader) (isNil bool, err error)
	}{
		{"Thread", func(r *Reader) (bool, error) { v, err := r.Thread("nope"); return v == nil, err }},
		{"Instance", func(r *Reader) (bool, error) { v, err := r.Instance("nope"); return v == nil, err }},
		{"ProviderSession", func(r *Reader) (bool, error) {
			v, err := r.ProviderSession("nope")
			return v == nil, err
		}},
		{"Credential", func(r *Reader) (bool, error) { v, err := r.Credential("nope"); return v == nil, err }},
		{"CredentialByTokenHash", func(r *Reader) (bool, error) {
			v, err := r.CredentialByTokenHash("nope")
			return v == nil, err
		}},
		{"ClientGrant", func(r *Reader) (bool, error) { v, err := r.ClientGrant("nope"); return v == nil, err }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			isNil, err := tt.read(s.Read())
			if !errors.Is(err, ErrNotFound) {
				t.Errorf("%s(%q) error = %v, want ErrNotFound", tt.name, "nope", err)
			}
			if !isNil {
				t.Errorf("%s(%q) returned a non-nil record with error %v", tt.name, "nope", err)
			}
		})
	}
}

func TestReadsReturnCopies(t *testing.T) {
	s := newStore(t)
	seedAll(t, s)

	t.Run("Thread", func(t *testing.T) {
		want := threadFixtures()["t4"]
		got, err := s.Read().Thread("t4")
		if err != nil {
			t.Fatalf("Thread(%q) = %v, want nil error", "t4", err)
		}
		got.Messages[0].Text = "changed"
		got.Messages = append(got.Messages, Message{Seq: 99})
		got.Run.ID = "changed"
		got.Run.Instance = "changed"
		got.Status = ThreadArchived
		again, err := s.Read().Thread("t4")
		if err != nil {
			t.Fatalf("Thread(%q) = %v, want nil error", "t4", err)
		}
		if diff := cmp.Diff(want, again, cmpOpts...); diff != "" {
			t.Errorf("Thread(%q) after mutating an earlier result (-want +got):\n%s", "t4", diff)
		}
	})

	t.Run("Threads", func(t *testing.T) {
		want := threadFixtures()["t4"]
		list, err := s.Read().Threads()
		if err != nil {
			t.Fatalf("Threads() = %v, want nil error", err)
		}
		for _, th := range list {
			if th.Run != nil {
				th.Run.ID = "changed"
			}
			for i := range th.Messages {
				th.Messages[i].Text = "changed"
			}
		}
		again, err := s.Read().Thread("t4")
		if err != nil {
			t.Fatalf("Thread(%q) = %v, want nil error", "t4", err)
		}
		if diff := cmp.Diff(want, again, cmpOpts...); diff != "" {
			t.Errorf("Thread(%q) after mutating a listing (-want +got):\n%s", "t4", diff)
		}
	})

	t.Run("Credential", func(t *testing.T) {
		want := credentialFixtures()["c1"]
		got, err := s.Read().CredentialByTokenHash("h1")
		if err != nil {
			t.Fatalf("CredentialByTokenHash(%q) = %v, want nil error", "h1", err)
		}
		got.Capabilities[0] = "admin"
		got.Capabilities = append(got.Capabilities, "root")
		got.State = StateRevoked
		again, err := s.Read().Credential("c1")
		if err != nil {
			t.Fatalf("Credential(%q) = %v, want nil error", "c1", err)
		}
		if diff := cmp.Diff(want, again, cmpOpts...); diff != "" {
			t.Errorf("Credential(%q) after mutating an earlier result (-want +got):\n%s", "c1", diff)
		}
	})

	t.Run("Instance", func(t *testing.T) {
		want := instanceFixtures()["i1"]
		got, err := s.Read().Instance("i1")
		if err != nil {
			t.Fatalf("Instance(%q) = %v, want nil error", "i1", err)
		}
		got.Config[0] = '['
		got.Capabilities[0] = "admin"
		again, err := s.Read().Instance("i1")
		if err != nil {
			t.Fatalf("Instance(%q) = %v, want nil error", "i1", err)
		}
		if diff := cmp.Diff(want, again, cmpOpts...); diff != "" {
			t.Errorf("Instance(%q) after mutating an earlier result (-want +got):\n%s", "i1", diff)
		}
	})

	t.Run("ProviderSession", func(t *testing.T) {
		want := providerSessionFixtures()["ps1"]
		list, err := s.Read().ProviderSessionsByInstance("i1")
		if err != nil {
			t.Fatalf("ProviderSessionsByInstance(%q) = %v, want nil error", "i1", err)
		}
		for _, p := range list {
			p.Threads[0] = "changed"
			p.Credentials[0] = "changed"
		}
		again, err := s.Read().ProviderSession("ps1")
		if err != nil {
			t.Fatalf("ProviderSession(%q) = %v, want nil error", "ps1", err)
		}
		if diff := cmp.Diff(want, again, cmpOpts...); diff != "" {
			t.Errorf("ProviderSession(%q) after mutating a listing (-want +got):\n%s", "ps1", diff)
		}
	})

	t.Run("Writer read not written back", func(t *testing.T) {
		want := threadFixtures()["t1"]
		mustWrite(t, s, func(w *Writer) error {
			th, err := w.Thread("t1")
			if err != nil {
				return err
			}
			th.Status = ThreadArchived
			th.Messages = append(th.Messages, Message{Seq: 1})
			return nil
		})
		again, err := s.Read().Thread("t1")
		if err != nil {
			t.Fatalf("Thread(%q) = %v, want nil error", "t1", err)
		}
		if diff := cmp.Diff(want, again, cmpOpts...); diff != "" {
			t.Errorf("Thread(%q) after mutating a Writer read (-want +got):\n%s", "t1", diff)
		}
	})
}

func TestPutStoresCopies(t *testing.T) {
	s := newStore(t)

	th := threadFixtures()["t4"]
	cred := credentialFixtures()["c1"]
	ps := providerSessionFixtures()["ps1"]
	inst := instanceFixtures()["i1"]
	mustWrite(t, s, func(w *Writer) error {
		if err := w.PutThread(th); err != nil {
			return err
		}
		if err := w.PutCredential(cred); err != nil {
			return err
		}
		if err := w.PutProviderSession(ps); err != nil {
			return err
		}
		return w.PutInstance(inst)
	})

	// Change everything reachable from the objects that were put.
	th.Status = ThreadArchived
	th.Run.ID = "changed"
	th.Messages[0].Text = "changed"
	cred.Capabilities[0] = "admin"
	cred.State = StateRevoked
	ps.Threads[0] = "changed"
	ps.Credentials[0] = "changed"
	inst.Config[0] = '['
	inst.Capabilities[0] = "admin"

	r := s.Read()
	gotTh, err := r.Thread("t4")
	if err != nil {
		t.Fatalf("Thread(%q) = %v, want nil error", "t4", err)
	}
	if diff := cmp.Diff(threadFixtures()["t4"], gotTh, cmpOpts...); diff != "" {
		t.Errorf("Thread(%q) after mutating the put object (-want +got):\n%s", "t4", diff)
	}
	gotCred, err := r.Credential("c1")
	if err != nil {
		t.Fatalf("Credential(%q) = %v, want nil error", "c1", err)
	}
	if diff := cmp.Diff(credentialFixtures()["c1"], gotCred, cmpOpts...); diff != "" {
		t.Errorf("Credential(%q) after mutating the put object (-want +got):\n%s", "c1", diff)
	}
	gotPS, err := r.ProviderSession("ps1")
	if err != nil {
		t.Fatalf("ProviderSession(%q) = %v, want nil error", "ps1", err)
	}
	if diff := cmp.Diff(providerSessionFixtures()["ps1"], gotPS, cmpOpts...); diff != "" {
		t.Errorf("ProviderSession(%q) after mutating the put object (-want +got):\n%s", "ps1", diff)
	}
	gotInst, err := r.Instance("i1")
	if err != nil {
		t.Fatalf("Instance(%q) = %v, want nil error", "i1", err)
	}
	if diff := cmp.Diff(instanceFixtures()["i1"], gotInst, cmpOpts...); diff != "" {
		t.Errorf("Instance(%q) after mutating the put object (-want +got):\n%s", "i1", diff)
	}
	// The index entries did not move either.
	if got, err := r.CountCredentialsByState(StateRevoked); err != nil || got != 0 {
		t.Errorf("CountCredentialsByState(%q) = %d, %v; want 0, nil", StateRevoked, got, err)
	}
	if got, err := r.ProviderSessionsByState(SessionOpen); err != nil || len(got) != 1 {
		t.Errorf("ProviderSessionsByState(%q) = %d sessions, %v; want 1, nil", SessionOpen, len(got), err)
	}
}

func TestWriteErrorKeepsNothing(t *testing.T) {
	s := newStore(t)
	seedAll(t, s)
	boom := errors.New("boom")

	err := s.Write(func(w *Writer) error {
		// A new row in every table.
		if err := w.PutThread(&Thread{ID: "t9", Status: ThreadActive}); err != nil {
			return err
		}
		if err := w.PutInstance(&Instance{ID: "i9", Driver: "stdio"}); err != nil {
			return err
		}
		if err := w.PutProviderSession(&ProviderSession{ID: "ps9", Instance: "i9", Threads: []string{"t9"}, State: SessionOpen}); err != nil {
			return err
		}
		if err := w.PutCredential(&Credential{ID: "c9", TokenHash: "h9", Kind: KindProvider, Namespace: "cred:c9", Thread: "t9", Instance: "i9", State: StateLive}); err != nil {
			return err
		}
		if err := w.PutClientGrant(&ClientGrant{ID: "g9", State: StateLive}); err != nil {
			return err
		}
		if err := w.PutMCPSession(&MCPSession{ID: "m9", Owner: "cred:c9", Credential: "c9"}); err != nil {
			return err
		}
		// An update and a delete of existing rows.
		t1 := threadFixtures()["t1"]
		t1.Status = ThreadArchived
		if err := w.PutThread(t1); err != nil {
			return err
		}
		if err := w.DeleteCredential("c1"); err != nil {
			return err
		}
		// The transaction sees its own writes.
		if _, err := w.Thread("t9"); err != nil {
			return fmt.Errorf("writer does not see its own insert: %w", err)
		}
		if _, err := w.Credential("c1"); !errors.Is(err, ErrNotFound) {
			return fmt.Errorf("writer still sees its own delete: %v", err)
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Store.Write = %v, want the function's error %v", err, boom)
	}

	r := s.Read()
	missing := []struct {
		name string
		read func() error
	}{
		{"Thread t9", func() error { _, err := r.Thread("t9"); return err }},
		{"Instance i9", func() error { _, err := r.Instance("i9"); return err }},
		{"ProviderSession ps9", func() error { _, err := r.ProviderSession("ps9"); return err }},
		{"Credential c9", func() error { _, err := r.Credential("c9"); return err }},
		{"CredentialByTokenHash h9", func() error { _, err := r.CredentialByTokenHash("h9"); return err }},
		{"ClientGrant g9", func() error { _, err := r.ClientGrant("g9"); return err }},
	}
	for _, m := range missing {
		if err := m.read(); !errors.Is(err, ErrNotFound) {
			t.Errorf("%s after a failed Write: error = %v, want ErrNotFound", m.name, err)
		}
	}
	gotT1, err := r.Thread("t1")
	if err != nil {
		t.Fatalf("Thread(%q) = %v, want nil error", "t1", err)
	}
	if diff := cmp.Diff(threadFixtures()["t1"], gotT1, cmpOpts...); diff != "" {
		t.Errorf("Thread(%q) after a failed update (-want +got):\n%s", "t1", diff)
	}
	if _, err := r.Credential("c1"); err != nil {
		t.Errorf("Credential(%q) after a failed delete = %v, want nil error", "c1", err)
	}
	if got, err := r.ProviderSessionsByInstance("i9"); err != nil || len(got) != 0 {
		t.Errorf("ProviderSessionsByInstance(%q) after a failed Write = %v, %v; want empty, nil", "i9", got, err)
	}
	if got, err := r.MCPSessions(); err != nil || len(got) != len(mcpSessionFixtures()) {
		t.Errorf("MCPSessions() after a failed Write = %d records, %v; want the %d seeded, nil", len(got), err, len(mcpSessionFixtures()))
	}

	// The store is still writable: the failed transaction released its lock.
	mustWrite(t, s, func(w *Writer) error { return w.PutThread(&Thread{ID: "t9", Status: ThreadActive}) })
	if _, err := s.Read().Thread("t9"); err != nil {
		t.Errorf("Thread(%q) after a later successful Write = %v, want nil error", "t9", err)
	}
}

func TestPutCredentialTokenHashConflict(t *testing.T) {
	s := newStore(t)
	seedAll(t, s)
	all := credentialFixtures()

	t.Run("other id same hash", func(t *testing.T) {
		dup := &Credential{ID: "c9", TokenHash: "h1", Kind: KindProvider, Namespace: "cred:c9", Thread: "t3", Instance: "i1", State: StateLive}
		var putErr error
		err := s.Write(func(w *Writer) error {
			putErr = w.PutCredential(dup)
			if _, err := w.Credential("c9"); !errors.Is(err, ErrNotFound) {
				return fmt.Errorf("Credential(%q) inside the transaction after a conflict = %v, want ErrNotFound", "c9", err)
			}
			return putErr
		})
		if !errors.Is(putErr, ErrConflict) {
			t.Fatalf("PutCredential(id %q, hash %q) = %v, want ErrConflict", dup.ID, dup.TokenHash, putErr)
		}
		if !errors.Is(err, ErrConflict) {
			t.Fatalf("Store.Write = %v, want ErrConflict", err)
		}
		r := s.Read()
		if got, err := r.Credential("c9"); !errors.Is(err, ErrNotFound) {
			t.Errorf("Credential(%q) after conflict = %v, %v; want nil, ErrNotFound", "c9", got, err)
		}
		got, err := r.CredentialByTokenHash("h1")
		if err != nil {
			t.Fatalf("CredentialByTokenHash(%q) = %v, want nil error", "h1", err)
		}
		if diff := cmp.Diff(all["c1"], got, cmpOpts...); diff != "" {
			t.Errorf("CredentialByTokenHash(%q) after conflict (-want +got):\n%s", "h1", diff)
		}
		if got, err := r.CredentialsByThread("t3"); err != nil || len(got) != 0 {
			t.Errorf("CredentialsByThread(%q) after conflict = %v, %v; want empty, nil", "t3", got, err)
		}
	})

	t.Run("writer ignores the conflict", func(t *testing.T) {
		// Even if fn swallows the error, the conflicting row was never inserted.
		dup := &Credential{ID: "c9", TokenHash: "h1", Kind: KindProvider, Namespace: "cred:c9", Thread: "t3", Instance: "i1", State: StateLive}
		var putErr error
		mustWrite(t, s, func(w *Writer) error {
			putErr = w.PutCredential(dup)
			return nil
		})
		if !errors.Is(putErr, ErrConflict) {
			t.Fatalf("PutCredential(id %q, hash %q) = %v, want ErrConflict", dup.ID, dup.TokenHash, putErr)
		}
		if got, err := s.Read().Credential("c9"); !errors.Is(err, ErrNotFound) {
			t.Errorf("Credential(%q) = %v, %v; want nil, ErrNotFound", "c9", got, err)
		}
		if got, err := s.Read().CredentialByTokenHash("h1"); err != nil || got.ID != "c1" {
			t.Errorf("CredentialByTokenHash(%q) = %v, %v; want c1, nil", "h1", got, err)
		}
	})

	t.Run("two new credentials in one transaction", func(t *testing.T) {
		err := s.Write(func(w *Writer) error {
			if err := w.PutCredential(&Credential{ID: "n1", TokenHash: "hn", Kind: KindClient, Namespace: "client:g2", State: StateLive}); err != nil {
				return err
			}
			return w.PutCredential(&Credential{ID: "n2", TokenHash: "hn", Kind: KindClient, Namespace: "client:g2", State: StateLive})
		})
		if !errors.Is(err, ErrConflict) {
			t.Fatalf("Store.Write putting two credentials with one hash = %v, want ErrConflict", err)
		}
		for _, id := range []string{"n1", "n2"} {
			if got, err := s.Read().Credential(id); !errors.Is(err, ErrNotFound) {
				t.Errorf("Credential(%q) = %v, %v; want nil, ErrNotFound", id, got, err)
			}
		}
	})

	t.Run("update same id same hash", func(t *testing.T) {
		c1 := all["c1"]
		c1.State, c1.RevokeReason, c1.Revoked = StateRevoked, "rotate", t0.Add(time.Hour)
		c1.Capabilities = []string{"thread.read"}
		mustWrite(t, s, func(w *Writer) error { return w.PutCredential(c1) })
		got, err := s.Read().CredentialByTokenHash("h1")
		if err != nil {
			t.Fatalf("CredentialByTokenHash(%q) = %v, want nil error", "h1", err)
		}
		if diff := cmp.Diff(c1, got, cmpOpts...); diff != "" {
			t.Errorf("CredentialByTokenHash(%q) after update (-want +got):\n%s", "h1", diff)
		}
		if n, err := s.Read().CountCredentialsByState(StateRevoked); err != nil || n != 3 {
			t.Errorf("CountCredentialsByState(%q) after update = %d, %v; want 3, nil", StateRevoked, n, err)
		}
	})

	t.Run("rehash frees the old hash", func(t *testing.T) {
		c3 := all["c3"]
		c3.TokenHash = "h3b"
		mustWrite(t, s, func(w *Writer) error { return w.PutCredential(c3) })
		if got, err := s.Read().CredentialByTokenHash("h3"); !errors.Is(err, ErrNotFound) {
			t.Errorf("CredentialByTokenHash(%q) after rehash = %v, %v; want nil, ErrNotFound", "h3", got, err)
		}
		if got, err := s.Read().CredentialByTokenHash("h3b"); err != nil || got.ID != "c3" {
			t.Errorf("CredentialByTokenHash(%q) after rehash = %v, %v; want c3, nil", "h3b", got, err)
		}
		// The old hash can now be given to another credential...
		mustWrite(t, s, func(w *Writer) error {
			return w.PutCredential(&Credential{ID: "c8", TokenHash: "h3", Kind: KindProvider, Namespace: "cred:c8", Thread: "t3", Instance: "i1", State: StateLive})
		})
		if got, err := s.Read().CredentialByTokenHash("h3"); err != nil || got.ID != "c8" {
			t.Errorf("CredentialByTokenHash(%q) = %v, %v; want c8, nil", "h3", got, err)
		}
		// ...but an existing credential cannot take a hash already in use.
		c4 := all["c4"]
		c4.TokenHash = "h3b"
		err := s.Write(func(w *Writer) error { return w.PutCredential(c4) })
		if !errors.Is(err, ErrConflict) {
			t.Errorf("PutCredential(id %q, hash %q) = %v, want ErrConflict", c4.ID, c4.TokenHash, err)
		}
		if got, err := s.Read().CredentialByTokenHash("h4"); err != nil || got.ID != "c4" {
			t.Errorf("CredentialByTokenHash(%q) after a conflicting rehash = %v, %v; want c4, nil", "h4", got, err)
		}
	})

	t.Run("delete frees the hash", func(t *testing.T) {
		mustWrite(t, s, func(w *Writer) error {
			if err := w.DeleteCredential("k3"); err != nil {
				return err
			}
			return w.PutCredential(&Credential{ID: "k4", TokenHash: "h7", Kind: KindClient, Namespace: "client:g2", Client: "g2", State: StateLive})
		})
		if got, err := s.Read().CredentialByTokenHash("h7"); err != nil || got.ID != "k4" {
			t.Errorf("CredentialByTokenHash(%q) = %v, %v; want k4, nil", "h7", got, err)
		}
	})
}

func TestDeleteMissingReturnsErrNotFound(t *testing.T) {
	s := newStore(t)
	seedAll(t, s)
	tests := []struct {
		name string
		del  func(w *Writer, id string) error
	}{
		{"DeleteThread", (*Writer).DeleteThread},
		{"DeleteProviderSession", (*Writer).DeleteProviderSession},
		{"DeleteCredential", (*Writer).DeleteCredential},
		{"DeleteClientGrant", (*Writer).DeleteClientGrant},
		{"DeleteMCPSession", (*Writer).DeleteMCPSession},
	}
	for _, tt := range tests {
		for _, id := range []string{"nope", ""} {
			t.Run(fmt.Sprintf("%s(%q)", tt.name, id), func(t *testing.T) {
				err := s.Write(func(w *Writer) error { return tt.del(w, id) })
				if !errors.Is(err, ErrNotFound) {
					t.Errorf("%s(%q) = %v, want ErrNotFound", tt.name, id, err)
				}
			})
		}
	}
}

func TestDeleteRemovesFromEveryIndex(t *testing.T) {
	s := newStore(t)
	seedAll(t, s)
	mustWrite(t, s, func(w *Writer) error {
		if err := w.DeleteCredential("c1"); err != nil {
			return err
		}
		if err := w.DeleteProviderSession("ps1"); err != nil {
			return err
		}
		if err := w.DeleteClientGrant("g3"); err != nil {
			return err
		}
		if err := w.DeleteMCPSession("m2"); err != nil {
			return err
		}
		return w.DeleteThread("t2")
	})
	r := s.Read()
	creds := credentialFixtures()
	sessions := providerSessionFixtures()
	tests := []struct {
		name string
		got  func() (any, error)
		want any
	}{
		{"CredentialByTokenHash(h1)", func() (any, error) { return r.CredentialByTokenHash("h1") }, (*Credential)(nil)},
		{"CredentialsByThread(t1)", func() (any, error) { return r.CredentialsByThread("t1") }, pick(creds, "c2", "c3")},
		{"CredentialsByThreadInstance(t1,i1)", func() (any, error) { return r.CredentialsByThreadInstance("t1", "i1") }, pick(creds, "c3")},
		{"CredentialsByNamespace(cred:c1)", func() (any, error) { return r.CredentialsByNamespace("cred:c1") }, pick(creds)},
		{"CountCredentialsByState(live)", func() (any, error) { return r.CountCredentialsByState(StateLive) }, 4},
		{"ProviderSessionsByInstance(i1)", func() (any, error) { return r.ProviderSessionsByInstance("i1") }, pick(sessions, "ps2")},
		{"ProviderSessionsByState(open)", func() (any, error) { return r.ProviderSessionsByState(SessionOpen) }, pick(sessions, "ps3", "ps4", "ps5")},
		{"ClientGrant(g3)", func() (any, error) { return r.ClientGrant("g3") }, (*ClientGrant)(nil)},
		{"Threads()", func() (any, error) { return r.Threads() }, pick(threadFixtures(), "t1", "t3", "t4", "t5")},
		{"MCPSessions()", func() (any, error) { return r.MCPSessions() }, pick(mcpSessionFixtures(), "m1", "m3", "m4", "m5")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.got()
			if err != nil && !errors.Is(err, ErrNotFound) {
				t.Fatalf("%s = %v, want nil or ErrNotFound", tt.name, err)
			}
			if diff := cmp.Diff(tt.want, got, cmpOpts...); diff != "" {
				t.Errorf("%s after delete (-want +got):\n%s", tt.name, diff)
			}
		})
	}
}

func TestReadIsSnapshot(t *testing.T) {
	s := newStore(t)
	seedThreads(t, s)
	before := s.Read()
	mustWrite(t, s, func(w *Writer) error {
		if err := w.PutThread(&Thread{ID: "t9", Status: ThreadActive}); err != nil {
			return err
		}
		return w.DeleteThread("t1")
	})
	if got, err := before.Thread("t9"); !errors.Is(err, ErrNotFound) {
		t.Errorf("old snapshot Thread(%q) = %v, %v; want nil, ErrNotFound", "t9", got, err)
	}
	if _, err := before.Thread("t1"); err != nil {
		t.Errorf("old snapshot Thread(%q) = %v, want nil error", "t1", err)
	}
	if _, err := s.Read().Thread("t9"); err != nil {
		t.Errorf("new snapshot Thread(%q) = %v, want nil error", "t9", err)
	}
	if _, err := s.Read().Thread("t1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("new snapshot Thread(%q) = %v, want ErrNotFound", "t1", err)
	}
}

func TestCredentialLiveAt(t *testing.T) {
	now := t0.Add(time.Hour)
	tests := []struct {
		name    string
		state   string
		expires time.Time
		want    bool
	}{
		{name: "live, no expiry", state: StateLive, want: true},
		{name: "live, expires later", state: StateLive, expires: now.Add(time.Second), want: true},
		{name: "live, expires a nanosecond later", state: StateLive, expires: now.Add(time.Nanosecond), want: true},
		{name: "live, expires exactly now", state: StateLive, expires: now, want: false},
		{name: "live, expired", state: StateLive, expires: now.Add(-time.Second), want: false},
		{name: "revoked, no expiry", state: StateRevoked, want: false},
		{name: "revoked, expires later", state: StateRevoked, expires: now.Add(time.Hour), want: false},
		{name: "revoked, expired", state: StateRevoked, expires: now.Add(-time.Hour), want: false},
		{name: "empty state", state: "", want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &Credential{ID: "c1", State: tt.state, Expires: tt.expires}
			if got := c.LiveAt(now); got != tt.want {
				t.Errorf("Credential{State: %q, Expires: %v}.LiveAt(%v) = %v, want %v", tt.state, tt.expires, now, got, tt.want)
			}
		})
	}
}

// TestConcurrentReadersGetPrivateCopies lets readers mutate what they read
// while a writer keeps rewriting the same rows; the race detector fails the
// test if any record is shared between a reader and the store.
func TestConcurrentReadersGetPrivateCopies(t *testing.T) {
	s := newStore(t)
	seedAll(t, s)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				r := s.Read()
				if th, err := r.Thread("t4"); err == nil {
					th.Messages[0].Text = "reader"
					th.Run.ID = "reader"
				}
				if c, err := r.CredentialByTokenHash("h1"); err == nil {
					c.Capabilities[0] = "reader"
				}
				if list, err := r.ProviderSessionsByInstance("i1"); err == nil {
					for _, p := range list {
						p.Threads[0] = "reader"
					}
				}
			}
		})
	}
	for i := range 200 {
		mustWrite(t, s, func(w *Writer) error {
			th, err := w.Thread("t4")
			if err != nil {
				return err
			}
			th.Messages = append(th.Messages, Message{Seq: th.NextSeq, Text: fmt.Sprint(i)})
			th.NextSeq++
			if err := w.PutThread(th); err != nil {
				return err
			}
			c, err := w.Credential("c1")
			if err != nil {
				return err
			}
			c.Capabilities = append(c.Capabilities[:1], fmt.Sprint(i))
			return w.PutCredential(c)
		})
	}
	close(stop)
	wg.Wait()

	th, err := s.Read().Thread("t4")
	if err != nil {
		t.Fatalf("Thread(%q) = %v, want nil error", "t4", err)
	}
	if got, want := len(th.Messages), 2+200; got != want {
		t.Errorf("len(Thread(%q).Messages) = %d, want %d", "t4", got, want)
	}
	if th.Messages[0].Text != "hello" || th.Run.ID != "r1" {
		t.Errorf("Thread(%q) was changed by a reader: Messages[0].Text = %q, Run.ID = %q", "t4", th.Messages[0].Text, th.Run.ID)
	}
}

// TestStoreMCPSessionWrites: the session actor's own writes, one
// transaction each, keep the records as Write does, and a missing one is
// ErrNotFound.
func TestStoreMCPSessionWrites(t *testing.T) {
	s := newStore(t)
	m1 := &MCPSession{ID: "m1", Owner: "cred:c1", Credential: "c1", ProtocolVersion: "2025-11-25", ClientName: "a"}
	m2 := &MCPSession{ID: "m2", Owner: "cred:c2", Credential: "c2", ProtocolVersion: "2025-06-18"}
	for _, m := range []*MCPSession{m1, m2} {
		if err := s.PutMCPSession(m); err != nil {
			t.Fatalf("PutMCPSession(%q) = %v, want nil", m.ID, err)
		}
	}
	got, err := s.Read().MCPSessions()
	if err != nil {
		t.Fatalf("MCPSessions() = %v", err)
	}
	if diff := cmp.Diff([]*MCPSession{m1, m2}, got); diff != "" {
		t.Errorf("MCPSessions() after two puts (-want +got):\n%s", diff)
	}
	if err := s.DeleteMCPSession("m1"); err != nil {
		t.Fatalf("DeleteMCPSession(m1) = %v, want nil", err)
	}
	got, _ = s.Read().MCPSessions()
	if diff := cmp.Diff([]*MCPSession{m2}, got); diff != "" {
		t.Errorf("MCPSessions() after deleting m1 (-want +got):\n%s", diff)
	}
	for _, id := range []string{"m1", "nope", ""} {
		if err := s.DeleteMCPSession(id); !errors.Is(err, ErrNotFound) {
			t.Errorf("DeleteMCPSession(%q) = %v, want ErrNotFound", id, err)
		}
	}
}
