package oauth

import (
	"container/list"
	"crypto/sha256"
	"strconv"
	"sync"
)

// confirmedRedirects are the redirect URIs, each of one client id, to
// which a sign-in approved with a right pairing code went (SPEC §5c.6):
// only to one of them does the authorization endpoint send an error back
// (RFC 6749 §4.1.2.1). Any other refusal is the server's page, so that a
// self-registered redirect URI no user ever approved is no open redirector
// (RFC 9700 §4.11.2). The set is in memory, bounded, the least recently
// used forgotten first (a forgotten one gets the page again), and keyed by
// a hash: it holds no client id or URI in clear.
type confirmedRedirects struct {
	max   int
	mu    sync.Mutex // guards the fields below
	order *list.List // of [sha256.Size]byte keys, the most recently used first
	byKey map[[sha256.Size]byte]*list.Element
}

func newConfirmed(max int) *confirmedRedirects {
	return &confirmedRedirects{max: max, order: list.New(), byKey: map[[sha256.Size]byte]*list.Element{}}
}

// confirmedKey hashes a client id and a redirect URI, exactly as
// presented (a loopback one with its port), length-prefixed so that no two
// pairs share a key.
func confirmedKey(clientID, redirect string) [sha256.Size]byte {
	return sha256.Sum256([]byte("confirmed\x00" + strconv.Itoa(len(clientID)) + ":" + clientID + redirect))
}

// add confirms redirect for clientID.
func (c *confirmedRedirects) add(clientID, redirect string) {
	k := confirmedKey(clientID, redirect)
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.byKey[k]; e != nil {
		c.order.MoveToFront(e)
		return
	}
	c.byKey[k] = c.order.PushFront(k)
	for c.order.Len() > c.max {
		oldest := c.order.Back()
		c.order.Remove(oldest)
		delete(c.byKey, oldest.Value.([sha256.Size]byte))
	}
}

// has reports whether redirect is confirmed for clientID, and keeps it.
func (c *confirmedRedirects) has(clientID, redirect string) bool {
	k := confirmedKey(clientID, redirect)
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.byKey[k]
	if e != nil {
		c.order.MoveToFront(e)
	}
	return e != nil
}
