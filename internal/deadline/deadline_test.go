package deadline

import (
	"testing"
	"time"
)

func TestRequest(t *testing.T) {
	var r Request
	before := time.Now()
	if got := r.Or(time.Hour); got.Before(before.Add(time.Hour)) {
		t.Errorf("Or(1h) of a request without deadline = %v, want now + 1h", got)
	}
	at := before.Add(time.Minute)
	r.SetDeadline(at)
	if got := r.Or(time.Hour); !got.Equal(at) || At(at) != r {
		t.Errorf("Or(1h) = %v, want the deadline %v", got, at)
	}
}

func TestLeftAndPassed(t *testing.T) {
	tests := []struct {
		name       string
		d          time.Time
		wantPassed bool
		minLeft    time.Duration
	}{
		{name: "an hour away", d: time.Now().Add(time.Hour), minLeft: 59 * time.Minute},
		{name: "gone", d: time.Now().Add(-time.Hour), wantPassed: true, minLeft: time.Millisecond},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			if got := Passed(test.d); got != test.wantPassed {
				t.Errorf("Passed = %v, want %v", got, test.wantPassed)
			}
			// A future's timeout is never negative (protoactor would wait
			// forever) and never below a millisecond.
			if got := Left(test.d); got < test.minLeft {
				t.Errorf("Left = %v, want at least %v", got, test.minLeft)
			}
		})
	}
}
