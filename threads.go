package mcpruntime

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/agenthost/mcpruntime/actors/thread"
	"github.com/agenthost/mcpruntime/internal/fault"
	"github.com/agenthost/mcpruntime/internal/names"
	"github.com/agenthost/mcpruntime/memdb"
)

// threadProps are the props of thread id's actor on this node.
func (r *Runtime) threadProps(id, instance string) *actor.Props {
	return thread.Props(thread.Config{
		ID:          id,
		Home:        r.node(),
		Instance:    instance,
		Store:       r.store,
		Now:         r.cfg.Now,
		Window:      r.cfg.CredentialWindow,
		Endpoint:    r.cfg.Endpoint,
		MessageLog:  r.cfg.MessageLog,
		RevokedKept: r.cfg.RevokedKept,
		Timeout:     r.budget(opDriver, ""),
		Logger:      r.cfg.Logger,
	})
}

// CreateThread creates a thread and starts its actor.
func (r *Runtime) CreateThread(ctx context.Context, id string, opts ThreadOptions) (Thread, error) {
	if err := r.checkOpen(); err != nil {
		return Thread{}, err
	}
	if err := validID("thread", id); err != nil {
		return Thread{}, err
	}
	if opts.Instance != "" {
		if _, err := r.store.Read().Instance(opts.Instance); err != nil {
			return Thread{}, fmt.Errorf("create thread %s: instance %q: %w", id, opts.Instance, ErrUnknownInstance)
		}
	}
	if err := ctx.Err(); err != nil {
		return Thread{}, err // nothing started
	}
	if r.cluster != nil {
		if _, err := r.store.Read().Thread(id); err == nil {
			return Thread{}, fmt.Errorf("thread %s: %w", id, ErrThreadExists)
		}
	}
	props := r.threadProps(id, opts.Instance)
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return Thread{}, ErrClosed
	}
	if r.threads[id] != nil {
		r.mu.Unlock()
		return Thread{}, fmt.Errorf("thread %s: %w", id, ErrThreadExists)
	}
	if len(r.threads) >= r.cfg.MaxThreads {
		r.mu.Unlock()
		return Thread{}, fmt.Errorf("create thread %s: %d threads exist (Config.MaxThreads): %w", id, r.cfg.MaxThreads, ErrTooManyThreads)
	}
	pid, err := r.root.SpawnNamed(props, names.Thread(id))
	if err == nil {
		r.threads[id] = pid
	}
	r.mu.Unlock()
	if errors.Is(err, actor.ErrNameExists) {
		// A delete of the same id is still stopping its actor.
		return Thread{}, fmt.Errorf("thread %s is being deleted: %w", id, ErrThreadExists)
	}
	if err != nil {
		return Thread{}, fmt.Errorf("start thread %s: %w", id, err)
	}
	info, err := call[*thread.ThreadInfo](ctx, r, target{pid: pid, gone: ErrUnknownThread}, &thread.GetThread{}, r.budget(opActor, ""))
	if err == nil && info.Thread.Home != r.node() {
		// Another node created it first (its row won the commit).
		err = fmt.Errorf("thread %s: %w", id, ErrThreadExists)
	}
	if errors.Is(err, ErrUnknownThread) && r.cluster != nil && r.cluster.ThreadExists(ctx, id) {
		// Another node created it first, and this replica has not applied
		// that row yet: the actor's write was refused, and it found none.
		err = fmt.Errorf("thread %s: %w", id, ErrThreadExists)
	}
	if err != nil && r.cluster != nil {
		r.dropThread(id, pid)
	}
	if err != nil {
		return Thread{}, err
	}
	return threadFromRecord(&info.Thread), nil
}

// Thread returns a snapshot of a thread, read from the store.
func (r *Runtime) Thread(ctx context.Context, id string) (Thread, error) {
	if err := r.checkOpen(); err != nil {
		return Thread{}, err
	}
	if err := validID("thread", id); err != nil {
		return Thread{}, err
	}
	t, err := r.store.Read().Thread(id)
	if errors.Is(err, memdb.ErrNotFound) {
		return Thread{}, fmt.Errorf("thread %s: %w", id, ErrUnknownThread)
	}
	if err != nil {
		return Thread{}, err
	}
	return threadFromRecord(t), nil
}

// Threads returns a snapshot of every thread, ordered by id: up to
// Config.MaxThreads of them, with their messages. ListThreads pages.
func (r *Runtime) Threads(ctx context.Context) ([]Thread, error) {
	if err := r.checkOpen(); err != nil {
		return nil, err
	}
	ts, err := r.store.Read().Threads()
	if err != nil {
		return nil, err
	}
	out := make([]Thread, len(ts))
	for i, t := range ts {
		out[i] = threadFromRecord(t)
	}
	return out, nil
}

// StartRun starts a run of instance on the thread and refreshes the
// liveness of the thread's credentials (a turn start). It returns the run id.
func (r *Runtime) StartRun(ctx context.Context, threadID, instance string) (string, error) {
	t, err := r.threadActor(threadID)
	if err != nil {
		return "", err
	}
	if err := validID("instance", instance); err != nil {
		return "", err
	}
	res, err := call[*thread.StartRunResult](ctx, r, t, &thread.StartRun{Instance: instance}, r.budget(opActor, ""))
	if err != nil {
		return "", err
	}
	return res.RunID, nil
}

// EndRun ends the thread's active run; runID "" ends whichever is active.
// A run that is an agent's turn (StartTurn) is interrupted: the agent is
// asked to stop once the run is over, so nothing it does after EndRun
// returned is a mutation.
func (r *Runtime) EndRun(ctx context.Context, threadID, runID string) error {
	var run memdb.Run
	if t, err := r.store.Read().Thread(threadID); err == nil && t.Run != nil {
		run = *t.Run
	}
	ended, err := r.endRun(ctx, threadID, runID)
	if err != nil {
		return err
	}
	if ended == run.ID {
		r.interrupt(ctx, threadID, run.Instance, ended)
	}
	return nil
}

// Touch refreshes the liveness of the thread's live credentials.
func (r *Runtime) Touch(ctx context.Context, threadID string) error {
	t, err := r.threadActor(threadID)
	if err != nil {
		return err
	}
	_, err = call[*thread.TouchResult](ctx, r, t, &thread.Touch{}, r.budget(opActor, ""))
	return err
}

// Detach unbinds the thread from its provider sessions and revokes
// nothing: a handoff. Re-opening the pair re-attaches the same session.
func (r *Runtime) Detach(ctx context.Context, threadID string) error {
	t, err := r.threadActor(threadID)
	if err != nil {
		return err
	}
	_, err = call[*thread.DetachResult](ctx, r, t, &thread.Detach{}, r.budget(opFanout, ""))
	return err
}

// Archive revokes every credential of the thread, across all instances,
// ends its run and makes it read-only.
func (r *Runtime) Archive(ctx context.Context, threadID string) error {
	t, err := r.threadActor(threadID)
	if err != nil {
		return err
	}
	_, err = call[*thread.ArchiveResult](ctx, r, t, &thread.Archive{}, r.budget(opFanout, ""))
	return err
}

// DeleteThread revokes every credential of the thread, removes it and stops
// its actor. The id may be used again afterwards.
func (r *Runtime) DeleteThread(ctx context.Context, threadID string) error {
	t, err := r.threadActor(threadID)
	if err != nil {
		return err
	}
	// Claim the thread first: of two racing deletes exactly one proceeds,
	// and calls that start from now on find no thread.
	r.mu.Lock()
	if r.threads[threadID] != t.pid {
		r.mu.Unlock()
		return fmt.Errorf("thread %s: %w", threadID, ErrUnknownThread)
	}
	delete(r.threads, threadID)
	r.mu.Unlock()
	_, err = call[*thread.DeleteResult](ctx, r, t, &thread.Delete{}, r.budget(opFanout, ""))
	if err != nil && !errors.Is(err, ErrUnknownThread) {
		// Not deleted (a timeout, a cancelled context): the thread stays
		// reachable, so its credentials can still be revoked.
		r.mu.Lock()
		if r.threads[threadID] == nil {
			r.threads[threadID] = t.pid
		}
		r.mu.Unlock()
		return err
	}
	// The id is free for CreateThread once the actor is gone.
	if serr := r.root.StopFuture(t.pid).Wait(); serr != nil {
		r.cfg.Logger.Warn("wait for thread actor to stop", "thread", threadID, "err", serr)
	}
	return err
}

// Post appends text to a thread's message log on behalf of caller: the
// built-in thread_post mutation (SPEC §4). threadID "" means the caller's
// own thread. The caller must be live (own its thread's active run) at the
// moment the message is appended; the target must exist and be active.
func (r *Runtime) Post(ctx context.Context, caller Principal, threadID, text string) (Message, error) {
	m, err := Mutate[memdb.Message](ctx, r, caller, threadID, thread.AppendMessage{Text: text})
	if err != nil {
		if errors.Is(err, fault.ErrInvalidMessage) {
			return Message{}, fmt.Errorf("%w: %w", ErrInvalidArgument, err)
		}
		return Message{}, err
	}
	return messageFromRecord(m), nil
}

// Mutate applies effect to a thread of rt on behalf of caller, checking in
// the same store transaction that the caller is live (SPEC §4 mutate
// class), and returns the effect's value, which must be an R. threadID ""
// means the caller's own thread. The effect is plain data (see
// thread.Effect). An effect that appends a message tells the subscribers of
// the thread's transcript (ResourceUpdated).
func Mutate[R any](ctx context.Context, rt *Runtime, caller Principal, threadID string, effect thread.Effect) (R, error) {
	var zero R
	if threadID == "" {
		if !caller.Provider() {
			return zero, fmt.Errorf("mutation without a thread: %w", ErrCredentialRequired)
		}
		threadID = caller.Thread
	}
	t, err := rt.threadActor(threadID)
	if err != nil {
		return zero, err
	}
	res, err := call[*thread.MutateResult](ctx, rt, t, &thread.Mutate{Caller: caller, Effect: effect}, rt.budget(opActor, ""))
	if err != nil {
		return zero, err
	}
	switch effect.(type) {
	case thread.AppendMessage, *thread.AppendMessage:
		rt.ResourceUpdated(TranscriptURI(threadID)) // SPEC §5b.5
	}
	v, ok := res.Value.(R)
	if !ok {
		return zero, fmt.Errorf("mutation of %s: the effect's value is a %T, not a %T: %w", threadID, res.Value, zero, ErrInternal)
	}
	return v, nil
}

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
	ts, err := r.store.Read().ThreadsAfter(after, limit+1) // one more: is there a next page?
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
		page.Threads[i].Messages = nil // a page's threads carry none
	}
	return page, nil
}
