package codex

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/agenthost/mcpruntime/actors/provider/agentproc"
)

// maxMessage bounds one line the app-server writes; a longer one ends the
// connection (the app-server is then stopped as broken).
const maxMessage = 64 << 20

// errConnClosed is the error of a call the app-server never answered
// because its stdout ended.
var errConnClosed = errors.New("codex app-server closed its stdout")

// errUnanswered wraps the context's error for a call that was sent but
// whose answer was not waited for: the app-server may act on it.
var errUnanswered = errors.New("sent, unanswered")

// rpcError is a JSON-RPC error object.
type rpcError struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

func (e *rpcError) Error() string { return fmt.Sprintf("%s (code %d)", e.Message, e.Code) }

// message is any JSON-RPC message, in either direction. The app-server
// omits "jsonrpc"; it accepts it.
type message struct {
	JSONRPC string          `json:"jsonrpc,omitempty"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method,omitempty"`
	Params  json.RawMessage `json:"params,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *rpcError       `json:"error,omitempty"`
}

// conn is a JSON-RPC connection to one app-server over its stdin and
// stdout, a message per line. Notifications and the server's requests are
// handed to the handlers on the reading goroutine, in order; a request's
// handler returns the result or the error to answer it with.
type conn struct {
	w         io.WriteCloser
	onNotify  func(method string, params json.RawMessage)
	onRequest func(method string, params json.RawMessage) (any, *rpcError)

	wmu sync.Mutex // serializes writes

	mu      sync.Mutex // guards the fields below
	next    int64
	pending map[int64]chan message
	err     error // set once the reader ended: every later call fails with it

	done chan struct{} // closed when the reader ended
}

func newConn(w io.WriteCloser, onNotify func(string, json.RawMessage), onRequest func(string, json.RawMessage) (any, *rpcError)) *conn {
	return &conn{w: w, onNotify: onNotify, onRequest: onRequest, pending: map[int64]chan message{}, done: make(chan struct{})}
}

// read reads messages from r until it ends, then fails every pending call
// and closes r. Run it on a goroutine of its own.
func (c *conn) read(r io.ReadCloser) {
	defer close(c.done)
	defer r.Close()
	br := bufio.NewReaderSize(r, 64<<10)
	var err error
	for {
		var line []byte
		line, err = agentproc.ReadLine(br, maxMessage)
		if err != nil {
			if !errors.Is(err, io.EOF) {
				err = fmt.Errorf("the codex app-server's output: %w", err)
			}
			break
		}
		if len(line) == 0 {
			continue
		}
		var m message
		if jerr := json.Unmarshal(line, &m); jerr != nil {
			err = fmt.Errorf("codex app-server wrote a line that is not JSON-RPC: %w", jerr)
			break
		}
		c.dispatch(m)
	}
	if errors.Is(err, io.EOF) {
		err = errConnClosed
	}
	c.mu.Lock()
	c.err = err
	pending := c.pending
	c.pending = nil
	c.mu.Unlock()
	for _, ch := range pending {
		close(ch)
	}
}

func (c *conn) dispatch(m message) {
	switch {
	case m.Method != "" && len(m.ID) > 0: // a request of the server's
		result, rerr := c.onRequest(m.Method, m.Params)
		reply := message{JSONRPC: "2.0", ID: m.ID, Error: rerr}
		if rerr == nil {
			b, err := json.Marshal(result)
			if err != nil {
				reply.Error = &rpcError{Code: -32603, Message: "internal error"}
			} else {
				reply.Result = b
			}
		}
		_ = c.write(reply) // a dead pipe shows as the reader's end
	case m.Method != "":
		c.onNotify(m.Method, m.Params)
	default: // a response
		var id int64
		if err := json.Unmarshal(m.ID, &id); err != nil {
			return // not one of ours
		}
		c.mu.Lock()
		ch := c.pending[id]
		delete(c.pending, id)
		c.mu.Unlock()
		if ch != nil {
			ch <- m
		}
	}
}

func (c *conn) write(m message) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, err = c.w.Write(b)
	return err
}

// call sends a request and waits for its answer, decoding its result into
// result (unless nil). A JSON-RPC error is returned as *rpcError.
func (c *conn) call(ctx context.Context, method string, params, result any) error {
	p, err := json.Marshal(params)
	if err != nil {
		return fmt.Errorf("%s: %w", method, err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: %w", method, err)
	}
	ch := make(chan message, 1)
	c.mu.Lock()
	if c.pending == nil {
		err := c.err
		c.mu.Unlock()
		return fmt.Errorf("%s: %w", method, err)
	}
	c.next++
	id := c.next
	c.pending[id] = ch
	c.mu.Unlock()
	forget := func() {
		c.mu.Lock()
		if c.pending != nil {
			delete(c.pending, id)
		}
		c.mu.Unlock()
	}
	idJSON, _ := json.Marshal(id)
	if err := c.write(message{JSONRPC: "2.0", ID: idJSON, Method: method, Params: p}); err != nil {
		forget()
		return fmt.Errorf("%s: write to codex app-server: %w", method, err)
	}
	select {
	case m, ok := <-ch:
		if !ok {
			c.mu.Lock()
			err := c.err
			c.mu.Unlock()
			return fmt.Errorf("%s: %w", method, err)
		}
		if m.Error != nil {
			return fmt.Errorf("%s: %w", method, m.Error)
		}
		if result != nil {
			if err := json.Unmarshal(m.Result, result); err != nil {
				return fmt.Errorf("%s: decode result: %w", method, err)
			}
		}
		return nil
	case <-ctx.Done():
		forget()
		return fmt.Errorf("%s: %w: %w", method, errUnanswered, ctx.Err())
	}
}

// notify sends a notification.
func (c *conn) notify(method string, params any) error {
	m := message{JSONRPC: "2.0", Method: method}
	if params != nil {
		p, err := json.Marshal(params)
		if err != nil {
			return err
		}
		m.Params = p
	}
	if err := c.write(m); err != nil {
		return fmt.Errorf("%s: write to codex app-server: %w", method, err)
	}
	return nil
}
