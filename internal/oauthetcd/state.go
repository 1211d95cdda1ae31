// Package oauthetcd keeps the OAuth authorization server's state in etcd
// (an internal/oauth.State), so that every node of several serves any step
// of any sign-in (SPEC §5d.9): the pairing codes, the authorization codes
// (and the spent ones remembered), the wrong-code budgets and the
// confirmed redirect URIs. Package cluster makes one per node on the
// node's etcd client; the module root never imports this package, so a
// runtime on one node links no etcd client.
//
// # Layout
//
//	/mcpruntime/oauth/pairing/<hash>     an outstanding pairing code: {access, expires}
//	/mcpruntime/oauth/code/<hash>        an authorization code, outstanding or spent: internal/oauth.Code
//	/mcpruntime/oauth/budget/all         the server's wrong-code bucket
//	/mcpruntime/oauth/budget/<sha256>    a client's (per source) or a source's bucket, by the hash of its key
//	/mcpruntime/oauth/confirmed/<sha256> a confirmed redirect URI of a client (internal/oauth.ConfirmedKey)
//
// Keys are hashes: no code, pairing code, client id or address is in a
// key; values hold no secret (a code's entry holds its PKCE challenge and
// its client's id and name, which are public).
//
// # Atomic steps
//
// Every check-and-change is one etcd transaction, so that of nodes racing
// for one key exactly one wins:
//
//   - a pairing code is taken by one Delete (WithPrevKV): only the delete
//     that removed it gets it;
//   - a code's spend and the record of its grant are a read, then a Put
//     conditioned on the entry's mod revision (compare-and-swap), tried
//     again on a conflict;
//   - a wrong code spends its three buckets in one Put conditioned on the
//     mod revisions of all three;
//   - a pairing code is added only if no other was added since the count
//     that found room (a compare on the mod revisions of the whole
//     prefix).
//
// Entries carry their expiry and are judged by it on every read; the
// tables are bounded as in one process (internal/oauth), pruned when full.
// The replica's applier (internal/replica) watches the same prefix and
// ignores these keys.
package oauthetcd

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/agenthost/mcpruntime/internal/fault"
	"github.com/agenthost/mcpruntime/internal/oauth"
)

// DefaultPrefix is where the state lives in etcd.
const DefaultPrefix = "/mcpruntime/oauth/"

// DefaultTimeout bounds one operation (its reads, writes and retries).
const DefaultTimeout = 5 * time.Second

// maxAttempts bounds the compare-and-swap retries of one operation.
const maxAttempts = 32

// maxOps bounds the operations of one transaction (etcd's --max-txn-ops
// is 128 by default).
const maxOps = 100

// ErrContended is returned when a key kept changing under an operation
// for maxAttempts tries.
var ErrContended = errors.New("oauthetcd: key kept changing")

// TestHookCAS, when set, is called between the read and the conditioned
// write of every compare-and-swap, with the operation's name ("spend",
// "issued", "budget") and its key: a test runs another node's operation
// there to make the race happen. For testing.
var TestHookCAS func(op, key string)

// Config configures a [State].
type Config struct {
	// Client is the etcd client; required. The State does not close it.
	Client *clientv3.Client
	// Prefix is where the state lives. Zero: DefaultPrefix.
	Prefix string
	// Timeout bounds one operation. Zero: DefaultTimeout.
	Timeout time.Duration
}

// State is an internal/oauth.State in etcd. Its methods are safe for
// concurrent use, and any number of States on one etcd (one per node)
// share what they hold.
type State struct {
	cli     *clientv3.Client
	timeout time.Duration
	l       oauth.Limits
	// Prefixes of the tables.
	pairing, code, budget, confirmed string
}

var _ oauth.State = (*State)(nil)

// New returns the State of cfg with limits l.
func New(cfg Config, l oauth.Limits) *State {
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	return &State{
		cli: cfg.Client, timeout: cfg.Timeout, l: l,
		pairing: cfg.Prefix + "pairing/", code: cfg.Prefix + "code/",
		budget: cfg.Prefix + "budget/", confirmed: cfg.Prefix + "confirmed/",
	}
}

func (s *State) ctx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.timeout)
}

func wrap(err *error, what string) {
	if *err != nil {
		*err = fmt.Errorf("oauth state: %s: %w", what, *err)
	}
}

func hook(op, key string) {
	if TestHookCAS != nil {
		TestHookCAS(op, key)
	}
}

// count is how many keys are under prefix, and the revision it was
// counted at.
func (s *State) count(ctx context.Context, prefix string) (int64, int64, error) {
	resp, err := s.cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, 0, err
	}
	return resp.Count, resp.Header.Revision, nil
}

// deleteKeys deletes keys, maxOps to a transaction.
func (s *State) deleteKeys(ctx context.Context, keys []string) error {
	for chunk := range slices.Chunk(keys, maxOps) {
		ops := make([]clientv3.Op, len(chunk))
		for i, k := range chunk {
			ops[i] = clientv3.OpDelete(k)
		}
		if _, err := s.cli.Txn(ctx).Then(ops...).Commit(); err != nil {
			return err
		}
	}
	return nil
}

// AddPairing implements oauth.State: the Put is conditioned on no pairing
// code having been added since the count that found room, so that racing
// nodes never hold more than MaxPairingCodes.
func (s *State) AddPairing(ctx context.Context, hash string, p oauth.Pairing, now time.Time) (err error) {
	defer wrap(&err, "add a pairing code")
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	val, err := json.Marshal(p)
	if err != nil {
		return err
	}
	key := s.pairing + hash
	for range maxAttempts {
		n, rev, err := s.count(ctx, s.pairing)
		if err != nil {
			return err
		}
		if n >= int64(s.l.MaxPairingCodes) {
			if err := s.pruneExpired(ctx, now); err != nil {
				return err
			}
			if n, rev, err = s.count(ctx, s.pairing); err != nil {
				return err
			}
			if n >= int64(s.l.MaxPairingCodes) {
				return fault.ErrTooManyPairingCodes
			}
		}
		resp, err := s.cli.Txn(ctx).If(
			clientv3.Compare(clientv3.ModRevision(s.pairing), "<", rev+1).WithPrefix(),
			clientv3.Compare(clientv3.CreateRevision(key), "=", 0),
		).Then(clientv3.OpPut(key, string(val))).Commit()
		if err != nil {
			return err
		}
		if resp.Succeeded {
			return nil
		}
	}
	return ErrContended
}

// pruneExpired deletes the expired pairing codes.
func (s *State) pruneExpired(ctx context.Context, now time.Time) error {
	resp, err := s.cli.Get(ctx, s.pairing, clientv3.WithPrefix())
	if err != nil {
		return err
	}
	var gone []string
	for _, kv := range resp.Kvs {
		var p oauth.Pairing
		if json.Unmarshal(kv.Value, &p) != nil || !now.Before(p.Expires) {
			gone = append(gone, string(kv.Key))
		}
	}
	return s.deleteKeys(ctx, gone)
}

// TakePairing implements oauth.State: one Delete, and only the one that
// removed the code has it.
func (s *State) TakePairing(ctx context.Context, hash string, now time.Time) (access string, ok bool, err error) {
	defer wrap(&err, "take a pairing code")
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	resp, err := s.cli.Delete(ctx, s.pairing+hash, clientv3.WithPrevKV())
	if err != nil {
		return "", false, err
	}
	if len(resp.PrevKvs) == 0 {
		return "", false, nil
	}
	var p oauth.Pairing
	if err := json.Unmarshal(resp.PrevKvs[0].Value, &p); err != nil || !now.Before(p.Expires) {
		return "", false, nil
	}
	return p.Access, true, nil
}

// CodeRoom implements oauth.State.
func (s *State) CodeRoom(ctx context.Context, now time.Time) (ok bool, err error) {
	defer wrap(&err, "make room for a code")
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	n, _, err := s.count(ctx, s.code)
	if err != nil || n < int64(s.l.MaxCodes) {
		return err == nil, err
	}
	resp, err := s.cli.Get(ctx, s.code, clientv3.WithPrefix())
	if err != nil {
		return false, err
	}
	var gone []string
	oldest, oldestExp := "", time.Time{}
	for _, kv := range resp.Kvs {
		var c oauth.Code
		switch {
		case json.Unmarshal(kv.Value, &c) != nil || !now.Before(c.KeptUntil()):
			gone = append(gone, string(kv.Key))
		case c.Spent && (oldest == "" || c.Expires.Before(oldestExp)):
			oldest, oldestExp = string(kv.Key), c.Expires
		}
	}
	if len(resp.Kvs)-len(gone) >= s.l.MaxCodes && oldest != "" {
		gone = append(gone, oldest)
	}
	if err := s.deleteKeys(ctx, gone); err != nil {
		return false, err
	}
	n, _, err = s.count(ctx, s.code)
	return err == nil && n < int64(s.l.MaxCodes), err
}

// AddCode implements oauth.State.
func (s *State) AddCode(ctx context.Context, hash string, c oauth.Code) (err error) {
	defer wrap(&err, "add a code")
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	val, err := json.Marshal(c)
	if err != nil {
		return err
	}
	key := s.code + hash
	resp, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).Then(clientv3.OpPut(key, string(val))).Commit()
	if err != nil {
		return err
	}
	if !resp.Succeeded {
		return errors.New("a code of that hash exists")
	}
	return nil
}

// casCode reads the code of hash and, if there is one, writes change's
// edit of it conditioned on the entry not having changed since, tried
// again on a conflict. found is false for no such code.
func (s *State) casCode(ctx context.Context, op, hash string, change func(*oauth.Code)) (found bool, err error) {
	key := s.code + hash
	for range maxAttempts {
		resp, err := s.cli.Get(ctx, key)
		if err != nil {
			return false, err
		}
		if len(resp.Kvs) == 0 {
			return false, nil
		}
		kv := resp.Kvs[0]
		var c oauth.Code
		if err := json.Unmarshal(kv.Value, &c); err != nil {
			return false, fmt.Errorf("decode %s: %w", key, err)
		}
		change(&c)
		val, err := json.Marshal(&c)
		if err != nil {
			return false, err
		}
		hook(op, key)
		txn, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", kv.ModRevision)).
			Then(clientv3.OpPut(key, string(val))).Commit()
		if err != nil {
			return false, err
		}
		if txn.Succeeded {
			return true, nil
		}
	}
	return false, ErrContended
}

// SpendCode implements oauth.State: of nodes racing to spend one code,
// exactly one is its first exchange.
func (s *State) SpendCode(ctx context.Context, hash string) (was oauth.Code, first, found bool, err error) {
	defer wrap(&err, "spend a code")
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	found, err = s.casCode(ctx, "spend", hash, func(c *oauth.Code) { was, first = c.Spend() })
	if !found || err != nil {
		return oauth.Code{}, false, false, err
	}
	return was, first, true, nil
}

// CodeIssued implements oauth.State.
func (s *State) CodeIssued(ctx context.Context, hash, grant string) (replayed bool, err error) {
	defer wrap(&err, "record a code's grant")
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	_, err = s.casCode(ctx, "issued", hash, func(c *oauth.Code) { c.Grant, replayed = grant, c.Replayed })
	return replayed && err == nil, err
}

// bucket is a budget's value: its kind ("all", "c" a client's, "s" a
// source's) and its token bucket.
type bucket struct {
	Kind string `json:"kind"`
	oauth.Bucket
}

// budgetKey is the etcd key of a client's or a source's bucket.
func (s *State) budgetKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return s.budget + hex.EncodeToString(sum[:])
}

// buckets are the keys of a submission's buckets (the server's, its
// client's and, for a known source, its source's), their kinds and rates.
func (s *State) buckets(clientHash, source string) (keys, kinds []string, rates []float64) {
	ck, sk := oauth.BudgetKeys(clientHash, source)
	keys = []string{s.budget + "all", s.budgetKey(ck)}
	kinds = []string{"all", "c"}
	rates = []float64{float64(s.l.FailuresPerMinute), float64(s.l.ClientFailuresPerMinute)}
	if sk != "" {
		keys, kinds = append(keys, s.budgetKey(sk)), append(kinds, "s")
		rates = append(rates, float64(s.l.SourceFailuresPerMinute))
	}
	return keys, kinds, rates
}

// readBuckets reads keys at one revision (and counts the budgets):
// missing ones are full, with mod revision 0.
func (s *State) readBuckets(ctx context.Context, keys []string) ([]bucket, []int64, int64, error) {
	ops := make([]clientv3.Op, 0, len(keys)+1)
	for _, k := range keys {
		ops = append(ops, clientv3.OpGet(k))
	}
	ops = append(ops, clientv3.OpGet(s.budget, clientv3.WithPrefix(), clientv3.WithCountOnly()))
	resp, err := s.cli.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return nil, nil, 0, err
	}
	bs, revs := make([]bucket, len(keys)), make([]int64, len(keys))
	for i := range keys {
		kvs := resp.Responses[i].GetResponseRange().Kvs
		if len(kvs) == 0 {
			continue
		}
		revs[i] = kvs[0].ModRevision
		if err := json.Unmarshal(kvs[0].Value, &bs[i]); err != nil {
			return nil, nil, 0, fmt.Errorf("decode %s: %w", keys[i], err)
		}
	}
	return bs, revs, resp.Responses[len(keys)].GetResponseRange().Count, nil
}

// BudgetOpen implements oauth.State: one read.
func (s *State) BudgetOpen(ctx context.Context, clientHash, source string, now time.Time) (open bool, err error) {
	defer wrap(&err, "read the wrong-code budgets")
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	keys, _, rates := s.buckets(clientHash, source)
	bs, _, _, err := s.readBuckets(ctx, keys)
	if err != nil {
		return false, err
	}
	for i := range bs {
		if bs[i].Refill(rates[i], now) < 1 {
			return false, nil
		}
	}
	return true, nil
}

// BudgetFail implements oauth.State: the three buckets in one write
// conditioned on all three, so that failures on several nodes at once are
// each counted.
func (s *State) BudgetFail(ctx context.Context, clientHash, source string, now time.Time) (err error) {
	defer wrap(&err, "spend the wrong-code budgets")
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	keys, kinds, rates := s.buckets(clientHash, source)
	for range maxAttempts {
		bs, revs, n, err := s.readBuckets(ctx, keys)
		if err != nil {
			return err
		}
		cmps := make([]clientv3.Cmp, len(keys))
		puts := make([]clientv3.Op, len(keys))
		for i, k := range keys {
			bs[i].Kind = kinds[i]
			bs[i].Fail(rates[i], now)
			val, err := json.Marshal(&bs[i])
			if err != nil {
				return err
			}
			cmps[i] = clientv3.Compare(clientv3.ModRevision(k), "=", revs[i])
			puts[i] = clientv3.OpPut(k, string(val))
		}
		hook("budget", keys[1])
		resp, err := s.cli.Txn(ctx).If(cmps...).Then(puts...).Commit()
		if err != nil {
			return err
		}
		if resp.Succeeded {
			if n > int64(oauth.MaxBudgetKeys(float64(s.l.FailuresPerMinute))) {
				return s.pruneBudgets(ctx, now)
			}
			return nil
		}
	}
	return ErrContended
}

// pruneBudgets deletes the client and source buckets that are full again
// (the same as none).
func (s *State) pruneBudgets(ctx context.Context, now time.Time) error {
	resp, err := s.cli.Get(ctx, s.budget, clientv3.WithPrefix())
	if err != nil {
		return err
	}
	var gone []string
	for _, kv := range resp.Kvs {
		var b bucket
		if json.Unmarshal(kv.Value, &b) != nil {
			gone = append(gone, string(kv.Key))
			continue
		}
		rate := float64(s.l.ClientFailuresPerMinute)
		switch b.Kind {
		case "all":
			continue
		case "s":
			rate = float64(s.l.SourceFailuresPerMinute)
		}
		if b.Refill(rate, now) >= rate {
			gone = append(gone, string(kv.Key))
		}
	}
	return s.deleteKeys(ctx, gone)
}

// confirmedKey is the etcd key of a confirmed redirect URI.
func (s *State) confirmedKey(clientID, redirect string) string {
	k := oauth.ConfirmedKey(clientID, redirect)
	return s.confirmed + hex.EncodeToString(k[:])
}

// Confirm implements oauth.State. The order of use is the keys' mod
// revisions (a use writes the key again): over the bound, the least
// recently written go.
func (s *State) Confirm(ctx context.Context, clientID, redirect string) (err error) {
	defer wrap(&err, "confirm a redirect URI")
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	if _, err := s.cli.Put(ctx, s.confirmedKey(clientID, redirect), "1"); err != nil {
		return err
	}
	n, _, err := s.count(ctx, s.confirmed)
	if err != nil || n <= int64(s.l.MaxConfirmedRedirects) {
		return err
	}
	resp, err := s.cli.Get(ctx, s.confirmed, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return err
	}
	kvs := resp.Kvs
	slices.SortFunc(kvs, func(a, b *mvccpb.KeyValue) int { return cmp.Compare(a.ModRevision, b.ModRevision) })
	var gone []string
	for _, kv := range kvs[:max(len(kvs)-s.l.MaxConfirmedRedirects, 0)] {
		gone = append(gone, string(kv.Key))
	}
	return s.deleteKeys(ctx, gone)
}

// Confirmed implements oauth.State: a confirmed URI is written again
// (conditioned on its revision, so that a forgotten one is not brought
// back), which makes it the most recently used.
func (s *State) Confirmed(ctx context.Context, clientID, redirect string) (ok bool, err error) {
	defer wrap(&err, "read a confirmed redirect URI")
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	key := s.confirmedKey(clientID, redirect)
	resp, err := s.cli.Get(ctx, key)
	if err != nil || len(resp.Kvs) == 0 {
		return false, err
	}
	_, err = s.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", resp.Kvs[0].ModRevision)).
		Then(clientv3.OpPut(key, "1")).Commit()
	return err == nil, err
}
