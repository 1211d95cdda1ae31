package mcpruntime

import (
	"maps"
	"slices"
	"sync"
)

// catalog holds one kind of registered thing (tools, resources, templates,
// prompts) by key. Registration is rare and lookups are on every request,
// so lookups read an immutable snapshot: every change builds a new map and
// a new sorted key slice.
type catalog[T any] struct {
	mu    sync.Mutex // serializes writers and guards the two fields below
	items map[string]T
	keys  []string // sorted
}

// snapshot returns the current items and their sorted keys; both are
// read-only.
func (c *catalog[T]) snapshot() (map[string]T, []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.items, c.keys
}

// get returns the item of key.
func (c *catalog[T]) get(key string) (T, bool) {
	items, _ := c.snapshot()
	v, ok := items[key]
	return v, ok
}

// add adds v under key unless key is taken; it reports whether it did.
func (c *catalog[T]) add(key string, v T) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, dup := c.items[key]; dup {
		return false
	}
	next := maps.Clone(c.items)
	if next == nil {
		next = map[string]T{}
	}
	next[key] = v
	keys := append(slices.Clone(c.keys), key)
	slices.Sort(keys)
	c.items, c.keys = next, keys
	return true
}

// remove removes key; it reports whether it was there.
func (c *catalog[T]) remove(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.items[key]; !ok {
		return false
	}
	next := maps.Clone(c.items)
	delete(next, key)
	c.items = next
	c.keys = slices.DeleteFunc(slices.Clone(c.keys), func(k string) bool { return k == key })
	return true
}
