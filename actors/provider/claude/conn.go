package claude

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"

	"github.com/agenthost/mcpruntime/actors/provider/agentproc"
)

// maxMessage bounds one line Claude Code writes; a longer one ends the
// connection (Claude Code is then stopped as broken).
const maxMessage = 64 << 20

// errConnClosed is the error of a control request Claude Code never
// answered because its stdout ended.
var errConnClosed = errors.New("claude closed its stdout")

// conn is the stream-json connection to one Claude Code process over its
// stdin and stdout, a message per line. Control requests the driver sends
// are matched to their control_response by request_id; every other
// message, and Claude Code's own control requests, go to the handlers on
// the reading goroutine, in order.
type conn struct {
	w         io.WriteCloser
	onMessage func(typ string, line []byte)
	// onRequest answers a control request of Claude Code's: the response,
	// or an error text.
	onRequest func(subtype string, request json.RawMessage) (any, string)

	wmu sync.Mutex // serializes writes

	mu      sync.Mutex // guards the fields below
	next    int64
	pending map[string]chan controlResponse
	err     error // set once the reader ended: every later request fails with it

	done chan struct{} // closed when the reader ended
}

func newConn(w io.WriteCloser, onMessage func(string, []byte), onRequest func(string, json.RawMessage) (any, string)) *conn {
	return &conn{w: w, onMessage: onMessage, onRequest: onRequest, pending: map[string]chan controlResponse{}, done: make(chan struct{})}
}

// read reads messages from r until it ends, then fails every pending
// request and closes r. Run it on a goroutine of its own.
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
				err = fmt.Errorf("claude's output: %w", err)
			}
			break
		}
		if len(line) == 0 {
			continue
		}
		var env envelope
		if jerr := json.Unmarshal(line, &env); jerr != nil {
			err = fmt.Errorf("claude wrote a line that is not JSON: %w", jerr)
			break
		}
		c.dispatch(env, line)
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

func (c *conn) dispatch(env envelope, line []byte) {
	switch env.Type {
	case typeControlResponse:
		var r controlResponse
		if json.Unmarshal(env.Response, &r) != nil {
			return
		}
		c.mu.Lock()
		ch := c.pending[r.RequestID]
		delete(c.pending, r.RequestID)
		c.mu.Unlock()
		if ch != nil {
			ch <- r
		}
	case typeControlRequest:
		var sub subtypeOnly
		_ = json.Unmarshal(env.Request, &sub)
		result, errText := c.onRequest(sub.Subtype, env.Request)
		var m controlResponseMsg
		m.Type = typeControlResponse
		m.Response.RequestID = env.RequestID
		if errText != "" {
			m.Response.Subtype, m.Response.Error = respError, errText
		} else {
			m.Response.Subtype, m.Response.Response = respSuccess, result
		}
		_ = c.write(m) // a dead pipe shows as the reader's end
	case typeControlCancel:
		// Claude Code gave up on a request of its own; the answer, if
		// already sent, is ignored.
	default:
		c.onMessage(env.Type, line)
	}
}

// write sends one message.
func (c *conn) write(m any) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if _, err := c.w.Write(b); err != nil {
		return fmt.Errorf("write to claude: %w", err)
	}
	return nil
}

// control sends a control request and waits for its response, decoding a
// success's response into result (unless nil). An error response is
// returned as an error with Claude Code's text.
func (c *conn) control(ctx context.Context, request any, subtype string, result any) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: %w", subtype, err)
	}
	ch := make(chan controlResponse, 1)
	c.mu.Lock()
	if c.pending == nil {
		err := c.err
		c.mu.Unlock()
		return fmt.Errorf("%s: %w", subtype, err)
	}
	c.next++
	id := "mcpruntime-" + strconv.FormatInt(c.next, 10)
	c.pending[id] = ch
	c.mu.Unlock()
	forget := func() {
		c.mu.Lock()
		if c.pending != nil {
			delete(c.pending, id)
		}
		c.mu.Unlock()
	}
	if err := c.write(controlRequest{Type: typeControlRequest, RequestID: id, Request: request}); err != nil {
		forget()
		return fmt.Errorf("%s: %w", subtype, err)
	}
	select {
	case r, ok := <-ch:
		if !ok {
			c.mu.Lock()
			err := c.err
			c.mu.Unlock()
			return fmt.Errorf("%s: %w", subtype, err)
		}
		if r.Subtype != respSuccess {
			return fmt.Errorf("%s: claude answered %s: %s", subtype, r.Subtype, r.Error)
		}
		if result != nil && len(r.Response) > 0 {
			if err := json.Unmarshal(r.Response, result); err != nil {
				return fmt.Errorf("%s: decode the response: %w", subtype, err)
			}
		}
		return nil
	case <-ctx.Done():
		forget()
		return fmt.Errorf("%s: %w", subtype, ctx.Err())
	}
}
