package mcpruntime

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"
)

// Bounds of a thread listing page (ListThreads, thread_list, the admin
// API's GET /admin/v1/threads).
const (
	// DefaultPageSize is the number of threads a page holds when the
	// caller does not say.
	DefaultPageSize = 100
	// MaxPageSize is the most a caller can ask for; more is cut to it.
	MaxPageSize = 1000
)

// ListOptions select one page of a listing.
type ListOptions struct {
	// Cursor continues a listing where the page that returned it as
	// NextCursor ended. Empty: from the first.
	Cursor string
	// Limit is the most threads the page holds. Zero: DefaultPageSize;
	// above MaxPageSize: MaxPageSize; negative: ErrInvalidArgument.
	Limit int
}

// ThreadPage is one page of threads, ordered by id. Its threads carry no
// messages: read one thread with Thread for those.
type ThreadPage struct {
	Threads []Thread
	// NextCursor, as ListOptions.Cursor, lists the threads after this page;
	// empty on the last page.
	NextCursor string
}

// cursorPrefix marks the cursors of this version. A cursor is opaque to
// callers: what follows is the id the page ended at, encoded.
const cursorPrefix = "c1."

func encodeCursor(lastID string) string {
	return cursorPrefix + base64.RawURLEncoding.EncodeToString([]byte(lastID))
}

func decodeCursor(c string) (string, error) {
	rest, ok := strings.CutPrefix(c, cursorPrefix)
	id, err := base64.RawURLEncoding.DecodeString(rest)
	if !ok || err != nil || validID("thread", string(id)) != nil {
		return "", fmt.Errorf("cursor %q is not one a listing returned: %w", c, ErrInvalidArgument)
	}
	return string(id), nil
}

// ListThreads returns one page of threads, ordered by id, read from the
// store. A thread created or deleted between two pages appears or not by
// where its id sorts; none appears twice.
func (r *Runtime) ListThreads(ctx context.Context, opts ListOptions) (ThreadPage, error) {
	if err := r.checkOpen(); err != nil {
		return ThreadPage{}, err
	}
	limit := opts.Limit
	switch {
	case limit < 0:
		return ThreadPage{}, fmt.Errorf("limit %d: %w", limit, ErrInvalidArgument)
	case limit == 0:
		limit = DefaultPageSize
	case limit > MaxPageSize:
		limit = MaxPageSize
	}
	after := ""
	if opts.Cursor != "" {
		var err error
		if after, err = decodeCursor(opts.Cursor); err != nil {
			return ThreadPage{}, err
		}
	}
	ts, err := r.store.Read().ThreadsAfter(nil, after, limit+1) // one more: is there a next page?
	if err != nil {
		return ThreadPage{}, err
	}
	var page ThreadPage
	if len(ts) > limit {
		ts = ts[:limit]
		page.NextCursor = encodeCursor(ts[limit-1].ID)
	}
	page.Threads = make([]Thread, len(ts))
	for i, t := range ts {
		t.Messages = nil
		page.Threads[i] = threadFromRecord(t)
	}
	return page, nil
}
