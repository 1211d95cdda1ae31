package mcpruntime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// Actor names. Every actor is addressed by a name derived from its id, so
// that a later cluster can route by identity instead of by local PID.
const (
	threadPrefix   = "thread/"
	instancePrefix = "provider/"
	clientPrefix   = "client/"
)

func (r *Runtime) threadPID(id string) *actor.PID {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.threads[id]
}

func (r *Runtime) instancePID(id string) *actor.PID {
	r.mu.Lock()
	defer r.mu.Unlock()
	if pid := r.instances[id]; pid != nil {
		return pid
	}
	// Unknown instances get a PID that dead-letters: the request fails fast.
	return r.system.NewLocalPID(instancePrefix + id)
}

func (r *Runtime) clientPID(id string) *actor.PID {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.clients[id]
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

// ask sends msg to pid and waits for the reply, bounded by the actor
// timeout and ctx's deadline.
func ask[R any](ctx context.Context, r *Runtime, pid *actor.PID, msg any, timeout time.Duration) (R, error) {
	var zero R
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	if d, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(d))
	}
	res, err := r.root.RequestFuture(pid, msg, timeout).Result()
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return zero, cerr
		}
		if errors.Is(err, actor.ErrDeadLetter) {
			// The actor stopped between lookup and request (a racing delete
			// or revoke): answer as if the lookup had missed.
			return zero, fmt.Errorf("request %T to %s: %w", msg, pid.Id, goneError(pid.Id))
		}
		return zero, fmt.Errorf("request %T to %s: %w", msg, pid.Id, err)
	}
	out, ok := res.(R)
	if !ok {
		return zero, fmt.Errorf("request %T to %s: unexpected reply %T", msg, pid.Id, res)
	}
	return out, nil
}

// goneError is the not-found sentinel of the kind of actor named id.
func goneError(id string) error {
	switch {
	case strings.HasPrefix(id, threadPrefix):
		return ErrUnknownThread
	case strings.HasPrefix(id, clientPrefix):
		return ErrUnknownClient
	case strings.HasPrefix(id, instancePrefix):
		return ErrUnknownInstance
	}
	return actor.ErrDeadLetter
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
