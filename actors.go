package mcpruntime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	cmap "github.com/orcaman/concurrent-map"

	"github.com/agenthost/mcpruntime/internal/deadline"
	"github.com/agenthost/mcpruntime/internal/names"
)

// The runtime's side of its actors: the system, the registry of their PIDs
// (named by identity through internal/names, so that a later cluster can
// route by id), lookup, and the one call helper every API method uses. No
// error of protoactor's leaves this file: a request that found nobody, or
// no answer in time, is ErrUnavailable, the kind's not-found sentinel or
// ErrTimeout.

// newSystem returns the actor system of a runtime logging to logger, its
// process registry resized (resizeRegistry).
func newSystem(logger *slog.Logger) *actor.ActorSystem {
	sys := actor.NewActorSystem(
		actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
			// protoactor's own info logs (system started, dead letters) are noise
			// for an embedder; its warnings and errors are not.
			return slog.New(minLevel{Handler: logger.Handler(), min: slog.LevelWarn}).With("lib", "protoactor")
		}),
		actor.WithDeadLetterThrottleInterval(100*time.Millisecond),
		actor.WithDeadLetterRequestLogging(false),
	)
	resizeRegistry(sys.ProcessRegistry, registryBuckets)
	return sys
}

// registryBuckets is how many concurrent maps the process registry spreads
// its PIDs over; each has cmap.SHARD_COUNT (32) Go maps behind as many
// locks. protoactor makes 1024 (32 768 maps), sized for many cores: each
// map's first entry costs it a whole group of slots, so the registry grew
// by about 290 B per map an actor or a future ever landed in — 425 B per
// idle MCP session at 10 000 sessions, ~9.5 MB once every map was touched
// — and the empty maps alone were ~2.6 MB before the first actor. With 32
// (1 024 maps) the maps fill and grow as maps do, ~40 B per entry, and a
// lookup still takes one of 1 024 read locks.
const registryBuckets = 32

// systemProcesses are the processes a new actor system registers itself,
// by name: what resizeRegistry moves.
var systemProcesses = []string{"eventstream", "deadletter"}

// resizeRegistry replaces the registry's buckets with n, moving the
// processes already registered (systemProcesses). It runs before the
// system is used: nothing else reads the registry yet. Should the system
// have registered anything else, the registry is left as it is, whole.
func resizeRegistry(r *actor.ProcessRegistryValue, n int) {
	registered := 0
	for _, old := range r.LocalPIDs.LocalPIDs {
		registered += old.Count()
	}
	buckets := make([]cmap.ConcurrentMap, n)
	for i := range buckets {
		buckets[i] = cmap.New()
	}
	resized := &actor.SliceMap{LocalPIDs: buckets}
	moved := 0
	for _, name := range systemProcesses {
		if p, ok := r.LocalPIDs.GetBucket(name).Get(name); ok {
			resized.GetBucket(name).Set(name, p)
			moved++
		}
	}
	if moved != registered {
		return
	}
	r.LocalPIDs = resized
}

// target is an actor to call, and what a request that finds it gone
// means: the not-found sentinel of its kind.
type target struct {
	pid  *actor.PID
	gone error
}

// threadActor returns the actor of a live thread.
func (r *Runtime) threadActor(id string) (target, error) {
	if err := r.checkOpen(); err != nil {
		return target{}, err
	}
	if err := validID("thread", id); err != nil {
		return target{}, err
	}
	r.mu.Lock()
	pid := r.threads[id]
	r.mu.Unlock()
	if pid == nil {
		if err := r.notHome(id); err != nil {
			return target{}, err
		}
		return target{}, fmt.Errorf("thread %s: %w", id, ErrUnknownThread)
	}
	return target{pid: pid, gone: ErrUnknownThread}, nil
}

// instanceActor returns the actor of provider instance id. An unknown
// instance gets its name's PID, which dead-letters: the request fails fast
// with ErrUnknownInstance.
func (r *Runtime) instanceActor(id string) target {
	r.mu.Lock()
	pid := r.instances[id]
	r.mu.Unlock()
	if pid == nil {
		pid = r.system.NewLocalPID(names.Instance(id))
	}
	return target{pid: pid, gone: ErrUnknownInstance}
}

// clientActor returns the actor of client grant id.
func (r *Runtime) clientActor(id string) (target, error) {
	r.mu.Lock()
	pid := r.clients[id]
	r.mu.Unlock()
	if pid == nil {
		return target{}, r.noGrant(id)
	}
	return target{pid: pid, gone: ErrUnknownClient}, nil
}

// op is the kind of a request, by what it waits for; budget gives each
// its time.
type op uint8

const (
	opActor    op = iota // one actor's answer
	opFanout             // a thread actor's, which waits for every provider instance (detach, archive, delete)
	opDriver             // an open or a rotation: a driver call on the way
	opClose              // a provider session's release, its driver's Close, and the answer
	opCloseAll           // shutdown: every session of an instance, each within its driver's close budget
)

// budget is how long a request of kind o may take, instance's for opClose:
// the one table of the runtime's timeouts. The call helper turns it, with
// the caller's context, into the request's deadline, which every actor the
// request reaches derives its own waits from.
func (r *Runtime) budget(o op, instance string) time.Duration {
	a := r.cfg.ActorTimeout
	switch o {
	case opFanout:
		return 2 * a
	case opDriver:
		return r.cfg.OpenTimeout + 2*a
	case opClose:
		r.mu.Lock()
		d, ok := r.closeTimeouts[instance]
		r.mu.Unlock()
		if !ok {
			d = r.cfg.OpenTimeout
		}
		return d + 2*a
	case opCloseAll:
		d := r.cfg.OpenTimeout
		r.mu.Lock()
		for _, c := range r.closeTimeouts {
			d = max(d, c)
		}
		r.mu.Unlock()
		return d + a
	}
	return a
}

// request is a message that carries its deadline (deadline.Request).
type request interface{ SetDeadline(time.Time) }

// reply is an actor's answer, its outcome a fault.
type reply interface{ Err() error }

// call sends msg to t with the deadline of ctx or budget, whichever comes
// first, and returns t's reply and the reply's fault as an error.
func call[R reply](ctx context.Context, r *Runtime, t target, msg request, budget time.Duration) (R, error) {
	var zero R
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	dl, fromCtx := time.Now().Add(budget), false
	if d, ok := ctx.Deadline(); ok && d.Before(dl) {
		dl, fromCtx = d, true
	}
	msg.SetDeadline(dl)
	res, err := r.root.RequestFuture(t.pid, msg, deadline.Left(dl)).Result()
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return zero, ctx.Err()
	case errors.Is(err, actor.ErrDeadLetter):
		// The actor stopped between lookup and request (a racing delete or
		// revoke): answer as if the lookup had missed.
		gone := t.gone
		if gone == nil {
			gone = ErrUnavailable
		}
		return zero, fmt.Errorf("request %T to %s: %w", msg, t.pid.Id, gone)
	case fromCtx:
		return zero, fmt.Errorf("request %T to %s: %w: %w", msg, t.pid.Id, ErrTimeout, context.DeadlineExceeded)
	default:
		return zero, fmt.Errorf("request %T to %s: no answer within %v: %w", msg, t.pid.Id, budget, ErrTimeout)
	}
	out, ok := res.(R)
	if !ok {
		return zero, fmt.Errorf("request %T to %s: unexpected reply %T: %w", msg, t.pid.Id, res, ErrInternal)
	}
	return out, out.Err()
}

// validID accepts 1 to 128 characters of [A-Za-z0-9._:@-], except dots
// alone. Ids name actors and appear in logs and URLs, so nothing else is
// allowed: "." and ".." would be path segments that no admin route can
// name.
func validID(kind, id string) error {
	ok := len(id) > 0 && len(id) <= 128
	dots := true
	for i := 0; ok && i < len(id); i++ {
		c := id[i]
		ok = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '.' || c == '_' || c == ':' || c == '@' || c == '-'
		dots = dots && c == '.'
	}
	if !ok || dots {
		return fmt.Errorf("%s id %q: %w", kind, id, ErrInvalidID)
	}
	return nil
}

func pids(m map[string]*actor.PID) []*actor.PID {
	out := make([]*actor.PID, 0, len(m))
	for _, pid := range m {
		out = append(out, pid)
	}
	return out
}

// minLevel drops records below min.
type minLevel struct {
	slog.Handler
	min slog.Level
}

func (h minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min && h.Handler.Enabled(ctx, l)
}

func (h minLevel) WithAttrs(as []slog.Attr) slog.Handler {
	return minLevel{Handler: h.Handler.WithAttrs(as), min: h.min}
}

func (h minLevel) WithGroup(name string) slog.Handler {
	return minLevel{Handler: h.Handler.WithGroup(name), min: h.min}
}
