package memdb

import (
	"crypto/sha256"
	"encoding/hex"
	"hash/maphash"
	"sync"

	gomemdb "github.com/hashicorp/go-memdb"
)

// authIndex holds every credential by its token hash, beside the tables,
// for [Store.CredentialForToken]: authentication reads it on every request,
// and a map lookup under a shard's read lock costs no allocation where a
// read transaction of the tables costs several. It holds the store's own
// records (never changed in place), and is kept by every write to the
// credentials table inside that write, under the store's write lock,
// before the write commits: it is never behind a write that returned, and
// changes in the order the writes commit. Ahead of the tables it may be,
// for the instant between the two, by a write that can no longer fail.
type authIndex struct {
	seed   maphash.Seed
	shards [authShards]authShard
}

const authShards = 64

type authShard struct {
	mu sync.RWMutex
	m  map[digest]*Credential
}

// digest is a token's SHA-256, the bytes whose hex is a row's TokenHash.
type digest = [sha256.Size]byte

// digestOf decodes a row's TokenHash; false when it is not the hex of a
// SHA-256 (no token hashes to it).
func digestOf(hash string) (digest, bool) {
	var d digest
	if len(hash) != 2*len(d) {
		return d, false
	}
	_, err := hex.Decode(d[:], []byte(hash))
	return d, err == nil
}

func newAuthIndex() *authIndex {
	a := &authIndex{seed: maphash.MakeSeed()}
	for i := range a.shards {
		a.shards[i].m = map[digest]*Credential{}
	}
	return a
}

func (a *authIndex) shard(d digest) *authShard {
	return &a.shards[maphash.Bytes(a.seed, d[:])%authShards]
}

func (a *authIndex) get(d digest) *Credential {
	sh := a.shard(d)
	sh.mu.RLock()
	c := sh.m[d]
	sh.mu.RUnlock()
	return c
}

// apply brings the index to a transaction's changes to the credentials
// table; the caller holds the store's write lock.
func (a *authIndex) apply(changes gomemdb.Changes) {
	for _, ch := range changes {
		if ch.Table != TableCredentials {
			continue
		}
		before, _ := ch.Before.(*Credential)
		after, _ := ch.After.(*Credential)
		if before != nil && (after == nil || after.TokenHash != before.TokenHash) {
			a.del(before.TokenHash, before)
		}
		if d, ok := digestOf(afterHash(after)); ok {
			sh := a.shard(d)
			sh.mu.Lock()
			sh.m[d] = after
			sh.mu.Unlock()
		}
	}
}

// del removes hash's entry if it is c's: a later change in the same
// transaction may have given the hash to another row already.
func (a *authIndex) del(hash string, c *Credential) {
	d, ok := digestOf(hash)
	if !ok {
		return
	}
	sh := a.shard(d)
	sh.mu.Lock()
	if cur := sh.m[d]; cur != nil && cur.ID == c.ID {
		delete(sh.m, d)
	}
	sh.mu.Unlock()
}

func afterHash(c *Credential) string {
	if c == nil {
		return ""
	}
	return c.TokenHash
}

// len is how many credentials the index holds (tests).
func (a *authIndex) len() int {
	n := 0
	for i := range a.shards {
		sh := &a.shards[i]
		sh.mu.RLock()
		n += len(sh.m)
		sh.mu.RUnlock()
	}
	return n
}

// CredentialForDigest returns the credential of the token whose SHA-256
// is d (token.Sum), or nil: the store's own record, which the caller must
// not change. It is authentication's read, made on every request, with no
// allocation, and reads the latest committed state — it is the tables'
// token_hash index kept apart, never behind a write that returned.
func (s *Store) CredentialForDigest(d [sha256.Size]byte) *Credential { return s.auth.get(d) }

// CredentialForToken is CredentialForDigest of the token whose hash is
// hash (hex SHA-256, as rows keep it); nil for one that is not.
func (s *Store) CredentialForToken(hash string) *Credential {
	d, ok := digestOf(hash)
	if !ok {
		return nil
	}
	return s.auth.get(d)
}
