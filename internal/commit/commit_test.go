package commit_test

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/goleak"

	"github.com/agenthost/mcpruntime/internal/actortest"
	"github.com/agenthost/mcpruntime/internal/commit"
	"github.com/agenthost/mcpruntime/memdb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// heldLog is a memdb.Log that applies each commit to its store, as a
// replica does once etcd answered, but only once the test lets it: every
// Commit reports itself on started (with the stack of the goroutine that
// called it) and waits for a value on release. failNext makes the next
// commit fail with that error instead, writing nothing.
type heldLog struct {
	store   *memdb.Store
	started chan string // the committing goroutine's stack
	release chan struct{}

	mu       sync.Mutex
	failNext error
}

func newHeldLog(t *testing.T) *heldLog {
	t.Helper()
	l := &heldLog{store: actortest.NewStore(t), started: make(chan string, 16), release: make(chan struct{})}
	l.store.SetLog(l)
	return l
}

func (l *heldLog) Commit(tx *memdb.Tx) error {
	buf := make([]byte, 64<<10)
	l.started <- string(buf[:runtime.Stack(buf, false)])
	<-l.release
	l.mu.Lock()
	fail := l.failNext
	l.failNext = nil
	l.mu.Unlock()
	if fail != nil {
		return fail
	}
	return l.store.Apply(func(w *memdb.Writer) error {
		for _, wr := range tx.Writes {
			if err := w.Put(wr.Table, wr.After); err != nil {
				return err
			}
		}
		return nil
	})
}

// The test actor's protocol: put a thread's row (through the Writer), read
// one, and put one from a continuation of a request to another actor.
type (
	put      struct{ id string }
	putLater struct {
		id   string
		peer *actor.PID // answers any message; the put follows its answer
	}
	get    struct{ id string }
	result struct {
		what string // "put t1", "get t1: present" …
		err  error
	}
)

// writer is an actor that writes through a commit.Writer.
type writer struct{ w commit.Writer }

func (a *writer) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *put:
		a.put(ctx, ctx.Sender(), msg.id)
	case *putLater:
		reply := ctx.Sender()
		f := ctx.RequestFuture(msg.peer, "ping", actortest.Timeout)
		ctx.ReenterAfter(f, func(any, error) { a.put(ctx, reply, msg.id) })
	case *get:
		_, err := a.w.Store.Read().Thread(msg.id)
		state := "present"
		if errors.Is(err, memdb.ErrNotFound) {
			state = "absent"
		}
		ctx.Respond(&result{what: "get " + msg.id + ": " + state})
	}
}

func (a *writer) put(ctx actor.Context, reply *actor.PID, id string) {
	a.w.Write(ctx, func(w *memdb.Writer) error {
		return w.PutThread(&memdb.Thread{ID: id, Status: memdb.ThreadActive})
	}, func(err error) { ctx.Send(reply, &result{what: "put " + id, err: err}) })
}

type env struct {
	t    *testing.T
	sys  *actor.ActorSystem
	log  *heldLog
	pid  *actor.PID
	peer *actor.PID
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{t: t, sys: actortest.NewSystem(t), log: newHeldLog(t)}
	e.pid = e.sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return &writer{w: commit.Writer{Store: e.log.store}} }))
	actortest.StopAtEnd(t, e.sys.Root, e.pid)
	e.peer = e.sys.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		if _, ok := ctx.Message().(string); ok {
			ctx.Respond("pong")
		}
	}))
	actortest.StopAtEnd(t, e.sys.Root, e.peer)
	return e
}

func (e *env) ask(msg any) *actor.Future {
	return e.sys.Root.RequestFuture(e.pid, msg, actortest.Timeout)
}

// committing waits until a commit has started and returns its stack.
func (e *env) committing() string {
	e.t.Helper()
	select {
	case stack := <-e.log.started:
		return stack
	case <-time.After(actortest.Timeout):
		e.t.Fatal("no commit started")
		return ""
	}
}

func (e *env) result(f *actor.Future) *result {
	e.t.Helper()
	res, err := f.Result()
	if err != nil {
		e.t.Fatalf("request: %v", err)
	}
	return res.(*result)
}

// TestCommitOffTheActor: the commit runs on a goroutine that is not the
// actor's: its Receive returned before the log's round trip began.
func TestCommitOffTheActor(t *testing.T) {
	e := newEnv(t)
	f := e.ask(&put{id: "t1"})
	stack := e.committing()
	close(e.log.release)
	if r := e.result(f); r.err != nil {
		t.Fatalf("put = %v", r.err)
	}
	for _, frame := range []string{"(*defaultMailbox).run", "(*actorContext).InvokeUserMessage", "(*writer).Receive"} {
		if strings.Contains(stack, frame) {
			t.Errorf("the commit ran inside the actor (%s on its stack):\n%s", frame, stack)
		}
	}
}

// TestLaterMessagesWaitForTheCommit: a message that arrives while a write
// commits is handled once the commit answered, on the state it left — here
// a read finds the row — and its answer comes after the write's.
func TestLaterMessagesWaitForTheCommit(t *testing.T) {
	e := newEnv(t)
	fPut := e.ask(&put{id: "t1"})
	e.committing()
	fGet := e.ask(&get{id: "t1"})
	// Held, the read cannot answer before the commit does. The wait is only
	// a chance for an actor that does not hold it to answer (and fail).
	got := make(chan *result, 1)
	go func() {
		res, _ := fGet.Result()
		r, _ := res.(*result)
		got <- r
	}()
	select {
	case r := <-got:
		close(e.log.release)
		t.Fatalf("a read answered while the write before it was committing: %+v", r)
	case <-time.After(time.Second):
	}
	close(e.log.release)
	if r := e.result(fPut); r.err != nil {
		t.Fatalf("put = %v", r.err)
	}
	if r := <-got; r == nil || r.what != "get t1: present" {
		t.Errorf("the read after the write = %q, want it to see the write", r.what)
	}
}

// TestWritesCommitInTheOrderAsked: a write asked for by a continuation
// while another commits waits its turn and is staged after it: one commit
// in flight at a time, in order.
func TestWritesCommitInTheOrderAsked(t *testing.T) {
	e := newEnv(t)
	fLater := e.ask(&putLater{id: "t2", peer: e.peer}) // its put follows the peer's answer
	fPut := e.ask(&put{id: "t1"})
	// Whichever of the two puts came first commits first; the other waits.
	e.committing()
	select {
	case <-e.log.started:
		t.Fatal("a second commit started while the first was in flight")
	case <-time.After(200 * time.Millisecond): // only a chance for a wrong Writer to start it
	}
	e.log.release <- struct{}{}
	e.committing()
	e.log.release <- struct{}{}
	for _, f := range []*actor.Future{fPut, fLater} {
		if r := e.result(f); r.err != nil {
			t.Errorf("%s = %v", r.what, r.err)
		}
	}
	for _, id := range []string{"t1", "t2"} {
		if _, err := e.log.store.Read().Thread(id); err != nil {
			t.Errorf("thread %s after both commits: %v", id, err)
		}
	}
}

// TestCommitErrorReachesTheContinuation: a failed commit's error reaches
// the write's continuation as it is (ErrStale stays ErrStale), nothing is
// written, and the actor goes on with its later messages.
func TestCommitErrorReachesTheContinuation(t *testing.T) {
	e := newEnv(t)
	e.log.failNext = fmt.Errorf("replica: commit: %w", memdb.ErrStale)
	fPut := e.ask(&put{id: "t1"})
	e.committing()
	fGet := e.ask(&get{id: "t1"})
	close(e.log.release)
	if r := e.result(fPut); !errors.Is(r.err, memdb.ErrStale) {
		t.Errorf("put = %v, want ErrStale", r.err)
	}
	if r := e.result(fGet); r.what != "get t1: absent" {
		t.Errorf("read after a failed write = %q, want absent", r.what)
	}
}

// TestStopWhileCommitting: system messages are handled while a write
// commits — the actor stops at once — and the commit's late answer is
// dropped.
func TestStopWhileCommitting(t *testing.T) {
	e := newEnv(t)
	e.ask(&put{id: "t1"})
	e.committing()
	if err := e.sys.Root.StopFuture(e.pid).Wait(); err != nil {
		t.Fatalf("stop while committing: %v", err)
	}
	close(e.log.release)
}

// TestLocalWriteAnswersAtOnce: a write that needs no round trip (a store
// without a log) commits on the actor's turn; its continuation runs at
// once, and no commit is in flight after it.
func TestLocalWriteAnswersAtOnce(t *testing.T) {
	sys := actortest.NewSystem(t)
	store := actortest.NewStore(t)
	pid := sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return &writer{w: commit.Writer{Store: store}} }))
	actortest.StopAtEnd(t, sys.Root, pid)
	for _, msg := range []any{&put{id: "t1"}, &get{id: "t1"}} {
		res, err := sys.Root.RequestFuture(pid, msg, actortest.Timeout).Result()
		if err != nil {
			t.Fatal(err)
		}
		if r := res.(*result); r.err != nil || r.what == "get t1: absent" {
			t.Errorf("%+v", r)
		}
	}
}
