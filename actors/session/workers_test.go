package session

import (
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestWorkersNeverWait: a turn that blocks holds its worker only — with
// every worker held, later turns still run at once (on goroutines of their
// own) — at most the asked number of workers start, a free worker takes
// the next turn, and Close stops them all (goleak fails on one left, after
// its retries), even from a worker's own turn, while turns scheduled after
// it still run.
func TestWorkersNeverWait(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	const n = 2
	w := NewWorkers(n, 300)
	if w.Throughput() != 300 {
		t.Fatalf("Throughput() = %d, want 300", w.Throughput())
	}
	release := make(chan struct{})
	held := make(chan struct{}, n)
	for range n {
		w.Schedule(func() { held <- struct{}{}; <-release })
	}
	for range n {
		<-held
	}
	// Every worker is held: three more turns run anyway, each while the
	// workers still wait.
	ran := make(chan struct{}, 3)
	go func() {
		for range 3 {
			w.Schedule(func() { ran <- struct{}{} })
		}
	}()
	for range 3 {
		select {
		case <-ran:
		case <-time.After(10 * time.Second):
			close(release)
			t.Fatal("a turn waited for a held worker")
		}
	}
	w.mu.Lock()
	started := w.started
	w.mu.Unlock()
	if started != n {
		t.Fatalf("%d workers started, want %d (the bound)", started, n)
	}
	close(release)

	// A worker whose turn ended waits for the next: a turn handed to the
	// workers directly (Schedule's first choice) is taken.
	took := make(chan struct{})
	select {
	case w.work <- func() { close(took) }:
	case <-time.After(10 * time.Second):
		t.Fatal("no worker waited for another turn after its own")
	}
	<-took
	var wg sync.WaitGroup
	for range 100 {
		wg.Add(1)
		w.Schedule(wg.Done)
	}
	wg.Wait()
	w.mu.Lock()
	started = w.started
	w.mu.Unlock()
	if started != n {
		t.Fatalf("after 100 more turns: %d workers started, want still %d", started, n)
	}

	closed := make(chan struct{})
	w.Schedule(func() { w.Close(); close(closed) }) // from a turn: it must not wait for itself
	<-closed
	w.Close() // idempotent
	done := make(chan struct{})
	w.Schedule(func() { close(done) })
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a turn scheduled after Close never ran")
	}
}
