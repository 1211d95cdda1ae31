package actortest

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
)

// InActor notes a commit made inside an actor's Receive: an actor whose
// write waits there for its log's round trip (SPEC §5d.7 says none does).
// Set Hook as a log's test hook (replica.TestHookCommit,
// durable.TestHookCommit), which runs on the committing goroutine.
type InActor struct {
	mu    sync.Mutex
	stack string // the first commit seen on an actor's goroutine
}

// Hook notes the calling goroutine's stack if it is an actor's: its
// mailbox runs it.
func (c *InActor) Hook() {
	buf := make([]byte, 32<<10)
	stack := string(buf[:runtime.Stack(buf, false)])
	if !strings.Contains(stack, "(*defaultMailbox).run") {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stack == "" {
		c.stack = stack
	}
}

// Stack is the stack of the first commit made inside an actor, or "".
func (c *InActor) Stack() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stack
}

// TestingM is what a TestMain runs (goleak's, and testing.M's, shape).
type TestingM interface{ Run() int }

// Main wraps m so that the run fails, after the tests, if a commit was
// made inside an actor.
func (c *InActor) Main(m TestingM) TestingM { return inActorMain{c: c, m: m} }

type inActorMain struct {
	c *InActor
	m TestingM
}

func (o inActorMain) Run() int {
	code := o.m.Run()
	if stack := o.c.Stack(); stack != "" {
		fmt.Fprintf(os.Stderr, "FAIL: a commit ran inside an actor's Receive (SPEC §5d.7); its stack:\n%s\n", stack)
		return 1
	}
	return code
}
