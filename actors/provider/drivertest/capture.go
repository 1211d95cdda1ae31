package drivertest

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
)

// Record is one captured log record, its attributes (those of Logger.With
// included) flattened to strings.
type Record struct {
	Msg   string
	Attrs map[string]string
}

// Capture is a slog.Handler that keeps every record. Safe for concurrent
// use; the zero value is ready.
type Capture struct {
	mu    *sync.Mutex
	recs  *[]Record
	attrs []slog.Attr
	once  sync.Once
}

func (c *Capture) init() {
	c.once.Do(func() {
		if c.mu == nil {
			c.mu, c.recs = new(sync.Mutex), new([]Record)
		}
	})
}

// Enabled is true: every level is kept.
func (c *Capture) Enabled(context.Context, slog.Level) bool { return true }

// Handle keeps r.
func (c *Capture) Handle(_ context.Context, r slog.Record) error {
	c.init()
	rec := Record{Msg: r.Message, Attrs: map[string]string{}}
	for _, a := range c.attrs {
		rec.Attrs[a.Key] = a.Value.Resolve().String()
	}
	r.Attrs(func(a slog.Attr) bool {
		rec.Attrs[a.Key] = a.Value.Resolve().String()
		return true
	})
	c.mu.Lock()
	defer c.mu.Unlock()
	*c.recs = append(*c.recs, rec)
	return nil
}

// WithAttrs is a handler keeping into the same records, with as added to
// each.
func (c *Capture) WithAttrs(as []slog.Attr) slog.Handler {
	c.init()
	return &Capture{mu: c.mu, recs: c.recs, attrs: append(slices.Clip(c.attrs), as...)}
}

// WithGroup is c: no groups are used.
func (c *Capture) WithGroup(string) slog.Handler { return c }

// Records are the records kept so far, in order.
func (c *Capture) Records() []Record {
	c.init()
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(*c.recs)
}

// Find returns the records with message msg whose attribute key is value.
func (c *Capture) Find(msg, key, value string) []Record {
	var out []Record
	for _, r := range c.Records() {
		if r.Msg == msg && r.Attrs[key] == value {
			out = append(out, r)
		}
	}
	return out
}

// Text is every record, a line each, its attributes' values as they are
// (not quoted), for agenttest.Leaks.
func (c *Capture) Text() []byte {
	var b bytes.Buffer
	for _, r := range c.Records() {
		b.WriteString(r.Msg)
		for k, v := range r.Attrs {
			fmt.Fprintf(&b, " %s=%s", k, v)
		}
		b.WriteByte('\n')
	}
	return b.Bytes()
}
