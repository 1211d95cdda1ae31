// Package gather lets an actor wait for several replies without blocking
// its Receive: one continuation, on the actor's own turn, once every
// future has answered or timed out. The thread actor (a release, a detach
// from every instance) and the instance actor (a closed session's
// credentials released through their threads) both need it.
package gather

import "github.com/asynkron/protoactor-go/actor"

// All waits for every future without blocking the actor, then calls done
// on the actor's turn with their answers and errors, in the order of fs.
// With no future, done runs at once. Each future needs a finite timeout,
// or done may never run.
func All(ctx actor.Context, fs []*actor.Future, done func(results []any, errs []error)) {
	results, errs := make([]any, len(fs)), make([]error, len(fs))
	if len(fs) == 0 {
		done(results, errs)
		return
	}
	left := len(fs)
	for i, f := range fs {
		ctx.ReenterAfter(f, func(res any, err error) {
			results[i], errs[i] = res, err
			if left--; left == 0 {
				done(results, errs)
			}
		})
	}
}
