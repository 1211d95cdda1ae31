package session

import (
	"fmt"
	"sync"
	"testing"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/google/go-cmp/cmp"

	"github.com/agenthost/mcpruntime/internal/actortest"
)

// stepDispatcher runs what the mailbox schedules only when the test says.
type stepDispatcher struct{ fns []func() }

func (d *stepDispatcher) Schedule(fn func()) { d.fns = append(d.fns, fn) }
func (d *stepDispatcher) Throughput() int    { return 300 }

// runAll runs the scheduled turns, and those they schedule, in order.
func (d *stepDispatcher) runAll() {
	for len(d.fns) > 0 {
		fn := d.fns[0]
		d.fns = d.fns[1:]
		fn()
	}
}

// recorder is a MessageInvoker that writes down what it was given.
type recorder struct {
	got       []string
	panicOn   string
	escalated []string
}

func (r *recorder) InvokeSystemMessage(m any) { r.got = append(r.got, fmt.Sprint("sys:", m)) }
func (r *recorder) InvokeUserMessage(m any) {
	if m == r.panicOn {
		panic("boom")
	}
	r.got = append(r.got, fmt.Sprint("user:", m))
}
func (r *recorder) EscalateFailure(reason, m any) {
	r.escalated = append(r.escalated, fmt.Sprint(reason, " on ", m))
}

func TestMailbox(t *testing.T) {
	tests := []struct {
		name string
		// post is called with the mailbox; every scheduled turn runs after.
		post          func(m *mailbox)
		panicOn       string
		want          []string
		wantEscalated []string
		wantQueued    int // user messages still waiting
	}{
		{
			name: "system messages first, each queue in order",
			post: func(m *mailbox) {
				m.PostUserMessage("a")
				m.PostSystemMessage("s1")
				m.PostUserMessage("b")
				m.PostSystemMessage("s2")
			},
			want: []string{"sys:s1", "sys:s2", "user:a", "user:b"},
		},
		{
			name: "suspended: user messages wait, system messages do not",
			post: func(m *mailbox) {
				m.PostSystemMessage(&actor.SuspendMailbox{})
				m.PostUserMessage("a")
				m.PostSystemMessage("s1")
			},
			want:       []string{"sys:s1"},
			wantQueued: 1,
		},
		{
			name: "resumed: the waiting user messages run",
			post: func(m *mailbox) {
				m.PostSystemMessage(&actor.SuspendMailbox{})
				m.PostUserMessage("a")
				m.dispatcher.(*stepDispatcher).runAll()
				m.PostSystemMessage(&actor.ResumeMailbox{})
				m.PostUserMessage("b")
			},
			want: []string{"user:a", "user:b"},
		},
		{
			name: "a panic is escalated with its message, and the next one still runs",
			post: func(m *mailbox) {
				m.PostUserMessage("a")
				m.PostUserMessage("bad")
				m.PostUserMessage("c")
			},
			panicOn:       "bad",
			want:          []string{"user:a", "user:c"},
			wantEscalated: []string{"boom on bad"},
		},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			d := &stepDispatcher{}
			r := &recorder{panicOn: test.panicOn}
			m := newMailbox().(*mailbox)
			m.RegisterHandlers(r, d)
			test.post(m)
			d.runAll()
			if diff := cmp.Diff(test.want, r.got); diff != "" {
				t.Errorf("invoked (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(test.wantEscalated, r.escalated); diff != "" {
				t.Errorf("escalated (-want +got):\n%s", diff)
			}
			if got := m.UserMessageCount(); got != test.wantQueued {
				t.Errorf("UserMessageCount() = %d, want %d", got, test.wantQueued)
			}
			if test.wantQueued == 0 && m.q != nil {
				t.Errorf("drained mailbox still holds its queues: %+v", *m.q)
			}
		})
	}
}

// countActor counts its int messages by sender index and records whether
// each sender's arrived in order.
type countActor struct {
	next    map[int]int
	ordered bool
}

type numbered struct{ sender, n int }

type getCounts struct{}

type counts struct {
	total   int
	ordered bool
}

func (a *countActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *numbered:
		if a.next[m.sender] != m.n {
			a.ordered = false
		}
		a.next[m.sender] = m.n + 1
	case *getCounts:
		total := 0
		for _, n := range a.next {
			total += n
		}
		ctx.Respond(&counts{total: total, ordered: a.ordered})
	}
}

// TestMailboxUnderConcurrentSenders: an actor on the session mailbox, with
// protoactor's own dispatcher, gets every message of concurrent senders,
// each sender's in order (run with -race).
func TestMailboxUnderConcurrentSenders(t *testing.T) {
	sys := actortest.NewSystem(t)
	props := actor.PropsFromProducer(func() actor.Actor {
		return &countActor{next: map[int]int{}, ordered: true}
	}, actor.WithMailbox(newMailbox))
	pid := sys.Root.Spawn(props)
	actortest.StopAtEnd(t, sys.Root, pid)
	const senders, each = 8, 2000
	var wg sync.WaitGroup
	for s := range senders {
		wg.Go(func() {
			for n := range each {
				sys.Root.Send(pid, &numbered{sender: s, n: n})
			}
		})
	}
	wg.Wait()
	// Each sender's messages were sent before the barrier's; the reply
	// comes after all of them were handled.
	res, err := sys.Root.RequestFuture(pid, &getCounts{}, actortest.Timeout).Result()
	if err != nil {
		t.Fatalf("getCounts: %v", err)
	}
	got := res.(*counts)
	if got.total != senders*each || !got.ordered {
		t.Errorf("received %d messages (ordered %v), want %d in order", got.total, got.ordered, senders*each)
	}
}
