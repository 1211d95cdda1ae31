package session

import (
	"errors"
	"testing"
)

func newStreams(events, bytes int) *Streams {
	return &Streams{limits: &StreamLimits{Events: events, Bytes: bytes}}
}

func seqs(events []Event) []uint32 {
	out := make([]uint32, len(events))
	for i, ev := range events {
		out[i] = ev.Seq
	}
	return out
}

// TestStreamsEviction: past the session's bounds the oldest event of the
// session goes, whichever stream it is in; the newest always stays; an
// event that goes before its reader delivered it is counted.
func TestStreamsEviction(t *testing.T) {
	ss := newStreams(3, 1<<20)
	a, _ := ss.Open(false)
	b, _ := ss.Open(false)
	a.Append([]byte("a1"), false, "")
	b.Append([]byte("b1"), false, "")
	a.Append([]byte("a2"), false, "")
	b.Append([]byte("b2"), true, "") // evicts a1
	if events, bytes, dropped := ss.Kept(); events != 3 || bytes != 6 || dropped != 1 {
		t.Fatalf("Kept = %d, %d, %d; want 3 events, 6 bytes, 1 dropped", events, bytes, dropped)
	}
	ra, err := ss.Resume(a.ID(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if events, _, _, _ := ra.Next(); len(events) != 1 || events[0].Seq != 2 {
		t.Fatalf("stream a replays %v, want [2] (1 went first)", seqs(events))
	}

	one := newStreams(10, 4)
	s, _ := one.Open(false)
	s.Append([]byte("12345678"), true, "") // over the bytes alone: still kept
	if events, bytes, _ := one.Kept(); events != 1 || bytes != 8 {
		t.Fatalf("Kept = %d, %d; want the newest event kept whatever its size", events, bytes)
	}
}

// TestStreamsReader: a reader gets what follows its event and is woken by
// what comes; delivering the response completes the stream, which then
// holds nothing; a second reader of the stream replaces the first.
func TestStreamsReader(t *testing.T) {
	ss := newStreams(100, 1<<20)
	s, _ := ss.Open(false)
	s.Append([]byte("p1"), false, "")
	s.Append([]byte("p2"), false, "")
	if _, err := ss.Resume(s.ID(), 3); !errors.Is(err, ErrUnknownStream) {
		t.Fatalf("Resume after an event not sent = %v, want ErrUnknownStream", err)
	}
	if _, err := ss.Resume(99, 0); !errors.Is(err, ErrUnknownStream) {
		t.Fatalf("Resume of a stream never opened = %v, want ErrUnknownStream", err)
	}
	first, _ := ss.Resume(s.ID(), 1)
	second, _ := ss.Resume(s.ID(), 1)
	if _, _, stop, _ := first.Next(); !stop {
		t.Fatal("the first reader was not told to stop once replaced")
	}
	events, final, stop, wake := second.Next()
	if stop || final || len(events) != 1 || events[0].Seq != 2 {
		t.Fatalf("second.Next() = %v, final %v, stop %v; want [2]", seqs(events), final, stop)
	}
	second.Delivered(2)
	s.Append([]byte("done"), true, "")
	select {
	case <-wake:
	default:
		t.Fatal("the reader was not woken by the response")
	}
	events, final, _, _ = second.Next()
	if !final || len(events) != 1 || events[0].Seq != 3 {
		t.Fatalf("second.Next() = %v, final %v; want the response, final", seqs(events), final)
	}
	second.Delivered(3)
	if events, bytes, _ := ss.Kept(); events != 0 || bytes != 0 || ss.Len() != 0 || ss.streams != nil {
		t.Fatalf("after the response was delivered: %d events, %d bytes, %d streams; want nothing", events, bytes, ss.Len())
	}
	if ss.Kind(s.ID()) != StreamGone || ss.Kind(99) != StreamUnknown {
		t.Fatalf("Kind = %v, %v; want gone, unknown", ss.Kind(s.ID()), ss.Kind(99))
	}
}

// TestStreamsStandalone: the standalone stream keeps only what its reader
// has not delivered, goes when its reader detaches with nothing left, and
// takes notifications only while a reader delivers it.
func TestStreamsStandalone(t *testing.T) {
	ss := newStreams(100, 1<<20)
	if sent, _ := ss.Notify([]byte("n0"), ""); sent {
		t.Fatal("Notify with no standalone stream delivered")
	}
	s, _ := ss.Open(true)
	r := s.Attach()
	sent1, _ := ss.Notify([]byte("n1"), "")
	sent2, _ := ss.Notify([]byte("n2"), "u")
	if !sent1 || !sent2 {
		t.Fatal("Notify with a reader did not deliver")
	}
	events, _, _, _ := r.Next()
	if len(events) != 2 || events[1].Check != "u" {
		t.Fatalf("Next = %+v, want n1, n2 (checked for u)", events)
	}
	r.Delivered(2)
	if n, _, _ := ss.Kept(); n != 0 {
		t.Fatalf("the standalone stream keeps %d delivered events, want 0", n)
	}
	ss.Notify([]byte("n3"), "")
	r.Detach()
	if ss.Kind(s.ID()) != StreamStandalone {
		t.Fatal("a standalone stream with an undelivered event went at Detach")
	}
	if sent, _ := ss.Notify([]byte("n4"), ""); sent {
		t.Fatal("Notify delivered to a stream no reader delivers")
	}
	r2, err := ss.Resume(s.ID(), 2)
	if err != nil {
		t.Fatal(err)
	}
	if events, _, _, _ := r2.Next(); len(events) != 1 || events[0].Seq != 3 {
		t.Fatalf("the resumed standalone stream replays %v, want [3]", seqs(events))
	}
	r2.Delivered(3)
	r2.Detach()
	if ss.Len() != 0 {
		t.Fatalf("%d streams after the standalone stream's reader left with nothing undelivered, want 0", ss.Len())
	}
}

// TestStreamsClose: the session's end drops every stream and stops its
// readers; nothing opens after.
func TestStreamsClose(t *testing.T) {
	ss := newStreams(100, 1<<20)
	s, _ := ss.Open(false)
	s.Append([]byte("x"), false, "")
	r, _ := ss.Resume(s.ID(), 0)
	ss.close()
	if _, _, stop, _ := r.Next(); !stop {
		t.Fatal("a reader was not stopped by the session's end")
	}
	if _, err := ss.Open(false); !errors.Is(err, ErrClosed) {
		t.Fatalf("Open after close = %v, want ErrClosed", err)
	}
	if n, b, _ := ss.Kept(); n != 0 || b != 0 {
		t.Fatalf("after close %d events, %d bytes kept", n, b)
	}
}
