package fault

import (
	"errors"
	"fmt"
	"testing"
)

func TestFaultRoundTrip(t *testing.T) {
	for c := Code(1); c < codeCount; c++ {
		s := c.Sentinel()
		if s == nil {
			t.Fatalf("code %d has no sentinel", c)
		}
		err := fmt.Errorf("thread t1: %w", s)
		f := From(err)
		if f.Code != c {
			t.Errorf("From(%q).Code = %d, want %d", err, f.Code, c)
		}
		back := f.Err()
		if !errors.Is(back, s) {
			t.Errorf("From(%q).Err() = %v, does not match its sentinel", err, back)
		}
		if back.Error() != err.Error() {
			t.Errorf("From(%q).Err().Error() = %q, want the original text", err, back.Error())
		}
		if again := From(back); again != f {
			t.Errorf("From(From(err).Err()) = %+v, want %+v", again, f)
		}
	}
}

func TestSentinelsDistinct(t *testing.T) {
	seen := map[error]Code{}
	for c := Code(1); c < codeCount; c++ {
		if prev, dup := seen[c.Sentinel()]; dup {
			t.Errorf("codes %d and %d share a sentinel", prev, c)
		}
		seen[c.Sentinel()] = c
	}
}

func TestFaultEdges(t *testing.T) {
	if From(nil) != (Fault{}) || (Fault{}).Err() != nil || !(Fault{}).OK() {
		t.Fatal("the zero Fault is success and its error is nil")
	}
	if f := From(errors.New("disk on fire")); f.Code != Internal || f.Message != "disk on fire" {
		t.Fatalf("From(unknown error) = %+v, want Internal with the text", f)
	}
	if err := (Fault{Code: UnknownThread}).Err(); err.Error() != ErrUnknownThread.Error() {
		t.Fatalf("a fault without message reads %q, want the sentinel's text", err)
	}
	if s := Code(60000).Sentinel(); s != ErrInternal {
		t.Fatalf("an unknown code's sentinel = %v, want ErrInternal", s)
	}
	if f := New(Busy, "rotate (%s, %s)", "t", "i"); f.Message != "rotate (t, i)" || !errors.Is(f.Err(), ErrBusy) {
		t.Fatalf("New = %+v", f)
	}
}
