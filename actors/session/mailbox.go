package session

import (
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"
)

// mailbox is a session actor's: protoactor's default mailbox's semantics
// (system messages first, suspension, the dispatcher's throughput, a panic
// escalated to the supervisor) in a fraction of its memory. An idle
// session keeps its mailbox for as long as it lives, and the default one
// holds two queues that are never freed (a 10-slot ring or a lock-free
// list's node each, ~170 B with the mailbox); this one holds its queues
// only while messages wait: 56 bytes, one 64-byte object, between them.
//
// A session's messages are few (Start, CloseStream, IdleCheck, its end), so
// one mutex for both queues costs nothing that matters.
type mailbox struct {
	status    atomic.Int32 // idle or running: scheduled on the dispatcher
	suspended atomic.Bool  // SuspendMailbox until ResumeMailbox: user messages wait
	mu        sync.Mutex   // guards q
	q         *queues      // nil while both are empty

	invoker    actor.MessageInvoker
	dispatcher actor.Dispatcher
}

// queues are a mailbox's messages waiting; made by the first, dropped with
// the last.
type queues struct{ system, user []any }

const (
	mailboxIdle int32 = iota
	mailboxRunning
)

// newMailbox is the session actors' MailboxProducer.
func newMailbox() actor.Mailbox { return &mailbox{} }

func (m *mailbox) PostUserMessage(msg any) {
	// Batches are unpacked and also delivered whole, as by protoactor's.
	if batch, ok := msg.(actor.MessageBatch); ok {
		for _, b := range batch.GetMessages() {
			m.PostUserMessage(b)
		}
	}
	if env, ok := msg.(*actor.MessageEnvelope); ok {
		if batch, ok := env.Message.(actor.MessageBatch); ok {
			for _, b := range batch.GetMessages() {
				m.PostUserMessage(b)
			}
		}
	}
	m.push(false, msg)
}

func (m *mailbox) PostSystemMessage(msg any) { m.push(true, msg) }

func (m *mailbox) RegisterHandlers(invoker actor.MessageInvoker, dispatcher actor.Dispatcher) {
	m.invoker, m.dispatcher = invoker, dispatcher
}

func (m *mailbox) Start() {}

func (m *mailbox) UserMessageCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.q == nil {
		return 0
	}
	return len(m.q.user)
}

func (m *mailbox) push(system bool, msg any) {
	m.mu.Lock()
	if m.q == nil {
		m.q = &queues{}
	}
	if system {
		m.q.system = append(m.q.system, msg)
	} else {
		m.q.user = append(m.q.user, msg)
	}
	m.mu.Unlock()
	m.schedule()
}

func (m *mailbox) schedule() {
	if m.status.CompareAndSwap(mailboxIdle, mailboxRunning) {
		m.dispatcher.Schedule(m.process)
	}
}

// process runs the messages, then idles; a message posted after the run
// ended and before the mailbox went idle is run by this turn, not lost.
func (m *mailbox) process() {
	for {
		m.run()
		m.status.Store(mailboxIdle)
		if !m.runnable() || !m.status.CompareAndSwap(mailboxIdle, mailboxRunning) {
			return
		}
	}
}

// runnable reports whether a message waits that run would take.
func (m *mailbox) runnable() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.q != nil && (len(m.q.system) > 0 || !m.suspended.Load() && len(m.q.user) > 0)
}

func (m *mailbox) run() {
	var msg any
	defer func() {
		if r := recover(); r != nil {
			m.invoker.EscalateFailure(r, msg)
		}
	}()
	for i, t := 0, m.dispatcher.Throughput(); ; i++ {
		if i > t {
			i = 0
			runtime.Gosched()
		}
		if msg = m.pop(true); msg != nil {
			switch msg.(type) {
			case *actor.SuspendMailbox:
				m.suspended.Store(true)
			case *actor.ResumeMailbox:
				m.suspended.Store(false)
			default:
				m.invoker.InvokeSystemMessage(msg)
			}
			continue
		}
		if m.suspended.Load() {
			return
		}
		if msg = m.pop(false); msg == nil {
			return
		}
		m.invoker.InvokeUserMessage(msg)
	}
}

// pop takes the first system or user message, nil if none; the queues go
// once both are empty.
func (m *mailbox) pop(system bool) any {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.q == nil {
		return nil
	}
	q := &m.q.user
	if system {
		q = &m.q.system
	}
	if len(*q) == 0 {
		return nil
	}
	msg := (*q)[0]
	(*q)[0] = nil
	*q = (*q)[1:]
	if len(m.q.system) == 0 && len(m.q.user) == 0 {
		m.q = nil
	}
	return msg
}
