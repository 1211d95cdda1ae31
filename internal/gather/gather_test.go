package gather_test

import (
	"testing"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/agenthost/mcpruntime/internal/actortest"
	"github.com/agenthost/mcpruntime/internal/gather"
)

// gathered is what the gathering actor saw in done.
type gathered struct {
	results []any
	errs    []error
}

// TestAll: done runs once, with every answer in the order of the futures,
// a failed request's error in its place, and at once when there is none.
func TestAll(t *testing.T) {
	sys := actortest.NewSystem(t)
	echo := sys.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		if s, ok := ctx.Message().(string); ok {
			ctx.Respond(s)
		}
	}))
	gone := sys.Root.Spawn(actor.PropsFromFunc(func(actor.Context) {}))
	if err := sys.Root.StopFuture(gone).Wait(); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name     string
		asks     []*actor.PID
		want     []any
		wantErrs []bool
	}{
		{name: "none"},
		{name: "in order", asks: []*actor.PID{echo, echo, echo}, want: []any{"0", "1", "2"}, wantErrs: []bool{false, false, false}},
		{name: "a dead letter in its place", asks: []*actor.PID{echo, gone, echo}, want: []any{"0", nil, "2"}, wantErrs: []bool{false, true, false}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			out := make(chan gathered, 2)
			asks := tt.asks
			a := sys.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
				if _, ok := ctx.Message().(struct{}); !ok {
					return
				}
				fs := make([]*actor.Future, len(asks))
				for i, pid := range asks {
					fs[i] = ctx.RequestFuture(pid, string(rune('0'+i)), actortest.Timeout)
				}
				gather.All(ctx, fs, func(results []any, errs []error) { out <- gathered{results, errs} })
			}))
			defer sys.Root.Stop(a)
			sys.Root.Send(a, struct{}{})
			got := <-out
			if len(got.results) != len(tt.asks) || len(got.errs) != len(tt.asks) {
				t.Fatalf("done got %d results, %d errors; want %d each", len(got.results), len(got.errs), len(tt.asks))
			}
			for i := range tt.asks {
				if got.results[i] != tt.want[i] {
					t.Errorf("results[%d] = %v, want %v", i, got.results[i], tt.want[i])
				}
				if (got.errs[i] != nil) != tt.wantErrs[i] {
					t.Errorf("errs[%d] = %v, want an error: %v", i, got.errs[i], tt.wantErrs[i])
				}
			}
			if len(out) != 0 {
				t.Error("done ran twice")
			}
		})
	}
}
