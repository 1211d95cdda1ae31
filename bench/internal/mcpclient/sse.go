package mcpclient

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

// ReadSSEReply reads a text/event-stream until the event carrying the
// JSON-RPC response to request id, and returns its result (or its error as
// an *RPCError). Comments, other events (notifications, requests,
// responses to other ids) and event fields other than data are skipped.
// The data lines of one event are joined with "\n", as the SSE
// specification says; an event not ended by a blank line before EOF is
// discarded.
func ReadSSEReply(r io.Reader, id int64) (json.RawMessage, error) {
	br := bufio.NewReaderSize(r, 4096)
	var data []byte
	inData := false // data holds at least one data line of the current event
	for {
		line, err := readLine(br)
		if err != nil {
			if err == io.EOF {
				return nil, fmt.Errorf("event stream ended before the response to request %d: %w", id, io.ErrUnexpectedEOF)
			}
			return nil, err
		}
		if len(line) == 0 { // end of event: dispatch
			if inData {
				if res, ok, err := matchEvent(data, id); ok || err != nil {
					return res, err
				}
			}
			data, inData = data[:0], false
			continue
		}
		field, value := splitField(line)
		if string(field) != "data" {
			continue // a comment (empty field), event, id or retry
		}
		if inData {
			data = append(data, '\n')
		}
		data, inData = append(data, value...), true
	}
}

// matchEvent decodes one event's data; ok reports that it was the
// response to id.
func matchEvent(data []byte, id int64) (res json.RawMessage, ok bool, err error) {
	msg, err := decodeMessage(data)
	if err != nil {
		return nil, false, err
	}
	if !msg.answers(id) {
		return nil, false, nil
	}
	res, err = msg.result()
	return res, true, err
}

// readLine returns the next line without its terminator (LF, CRLF or CR at
// end of a read). The slice is valid until the next read.
func readLine(br *bufio.Reader) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		// A long line: gather it.
		long := append([]byte(nil), line...)
		for err == bufio.ErrBufferFull {
			line, err = br.ReadSlice('\n')
			long = append(long, line...)
		}
		line = long
	}
	if err != nil && !(err == io.EOF && len(line) > 0) {
		return nil, err
	}
	line = bytes.TrimSuffix(line, []byte("\n"))
	return bytes.TrimSuffix(line, []byte("\r")), nil
}

// splitField splits an SSE line into field name and value; one space after
// the colon is not part of the value. A comment has an empty field.
func splitField(line []byte) (field, value []byte) {
	i := bytes.IndexByte(line, ':')
	if i < 0 {
		return line, nil
	}
	field, value = line[:i], line[i+1:]
	if len(value) > 0 && value[0] == ' ' {
		value = value[1:]
	}
	return field, value
}

// Stream is the session's standalone GET event stream, read (and
// discarded) in the background until it ends.
type Stream struct {
	body io.ReadCloser
	done chan struct{}

	mu           sync.Mutex // guards the fields below
	closedAt     time.Time  // when the server ended the stream
	clientClosed bool       // Close was called
}

// OpenStream opens the session's GET stream and returns once the server
// answered 200. ctx bounds the whole stream, not just the open.
func (s *Session) OpenStream(ctx context.Context) (*Stream, error) {
	req, err := s.request(ctx, http.MethodGet, "", "", nil)
	if err != nil {
		return nil, err
	}
	req.Header["Accept"] = []string{"text/event-stream"}
	resp, err := s.client.HTTP.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET stream: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		defer drain(resp.Body)
		return nil, statusError("GET", resp)
	}
	st := &Stream{body: resp.Body, done: make(chan struct{})}
	go st.read()
	return st, nil
}

func (st *Stream) read() {
	_, _ = io.Copy(io.Discard, st.body)
	st.mu.Lock()
	if !st.clientClosed {
		st.closedAt = time.Now()
	}
	st.mu.Unlock()
	close(st.done)
}

// Done is closed when the stream has ended.
func (st *Stream) Done() <-chan struct{} { return st.done }

// ClosedAt is when the server ended the stream: zero while it is open, and
// if the client closed it first.
func (st *Stream) ClosedAt() time.Time {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.closedAt
}

// Close ends the stream from the client side.
func (st *Stream) Close() error {
	st.mu.Lock()
	st.clientClosed = st.closedAt.IsZero()
	st.mu.Unlock()
	return st.body.Close()
}
