package session

import (
	"errors"
	"testing"
)

// TestAsks: ids are srv-<n>, unique in the session across rounds; an
// answer reaches its ask once, by its id's key only; End returns what was
// left unanswered and keeps nothing; the bound and the session's end
// refuse new rounds.
func TestAsks(t *testing.T) {
	var a Asks
	r1, err := a.Begin(2)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := a.Begin(1)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range []*Round{r1, r2} {
		for _, k := range r.Asks() {
			ids = append(ids, string(k.ID()))
		}
	}
	if want := []string{`"srv-1"`, `"srv-2"`, `"srv-3"`}; len(ids) != 3 || ids[0] != want[0] || ids[1] != want[1] || ids[2] != want[2] {
		t.Fatalf("ids = %v, want %v", ids, want)
	}
	if a.Answer(`srv-2`, []byte(`{}`), nil) {
		t.Fatal("Answer(srv-2 unquoted) matched: keys are the id's JSON")
	}
	if !a.Answer(`"srv-2"`, []byte(`{"x":1}`), nil) {
		t.Fatal(`Answer("srv-2") matched nothing`)
	}
	if a.Answer(`"srv-2"`, []byte(`{}`), nil) {
		t.Fatal(`a second Answer("srv-2") matched`)
	}
	if got := <-r1.Answers(); got.Index != 1 || string(got.Result) != `{"x":1}` {
		t.Fatalf("answer = %+v, want index 1, result {\"x\":1}", got)
	}
	if left := a.End(r1); len(left) != 1 || string(left[0].ID()) != `"srv-1"` {
		t.Fatalf("End(r1) left %d asks, want srv-1", len(left))
	}
	if a.Answer(`"srv-1"`, []byte(`{}`), nil) {
		t.Fatal("an answer after End matched")
	}
	if n := a.Pending(); n != 1 {
		t.Fatalf("Pending() = %d, want 1 (srv-3)", n)
	}
	a.End(r2)
	if a.pending != nil {
		t.Fatal("the table keeps a map with nothing pending")
	}

	if _, err := a.Begin(MaxPendingAsks + 1); !errors.Is(err, ErrTooManyAsks) {
		t.Fatalf("Begin(%d) = %v, want ErrTooManyAsks", MaxPendingAsks+1, err)
	}
	if _, err := a.Begin(MaxPendingAsks); err != nil {
		t.Fatalf("Begin(%d) = %v", MaxPendingAsks, err)
	}
	a.close()
	if _, err := a.Begin(1); !errors.Is(err, ErrClosed) {
		t.Fatalf("Begin after close = %v, want ErrClosed", err)
	}
	if a.Pending() != 0 {
		t.Fatal("asks pending after close")
	}
}
