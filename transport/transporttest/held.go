package transporttest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Held is a POST written by hand on a connection of its own: its headers
// and the first part of its body are sent, the rest when the test says. It
// is how a slow client holds a request open.
type Held struct {
	t    *testing.T
	Conn net.Conn
	br   *bufio.Reader
	Rest string // body bytes not sent yet
}

// ConnBound bounds every read and write of a held POST's connection, so a
// test that goes wrong fails instead of hanging; no assertion depends on it.
const ConnBound = HangAfter

// HoldPost sends the headers h (Content-Length: len(body)) and all of body
// but its last unsent bytes. unsent 0 sends the whole body.
func (e *Client) HoldPost(h http.Header, body string, unsent int) *Held {
	e.T.Helper()
	p := e.DialPost(h, fmt.Sprintf("Content-Length: %d\r\n", len(body)))
	p.Rest = body[len(body)-unsent:]
	p.Write(body[:len(body)-unsent])
	return p
}

// HoldChunked sends the headers h with a chunked body, and first as its
// first chunk; Finish sends the terminating chunk.
func (e *Client) HoldChunked(h http.Header, first string) *Held {
	e.T.Helper()
	p := e.DialPost(h, "Transfer-Encoding: chunked\r\n")
	p.Write(fmt.Sprintf("%x\r\n%s\r\n", len(first), first))
	p.Rest = "0\r\n\r\n"
	return p
}

// DialPost opens a connection and sends a POST's request line, the headers
// h and framing (the body's length header).
func (e *Client) DialPost(h http.Header, framing string) *Held {
	e.T.Helper()
	conn, err := net.Dial("tcp", e.TS.Listener.Addr().String())
	if err != nil {
		e.T.Fatalf("dial: %v", err)
	}
	e.T.Cleanup(func() { conn.Close() })
	var b strings.Builder
	fmt.Fprintf(&b, "POST /mcp HTTP/1.1\r\nHost: %s\r\n", e.TS.Listener.Addr())
	for k, vs := range h {
		for _, v := range vs {
			fmt.Fprintf(&b, "%s: %s\r\n", k, v)
		}
	}
	b.WriteString(framing + "\r\n")
	p := &Held{t: e.T, Conn: conn, br: bufio.NewReader(conn)}
	p.Write(b.String())
	return p
}

// Write sends s.
func (p *Held) Write(s string) {
	p.t.Helper()
	p.Conn.SetWriteDeadline(time.Now().Add(ConnBound))
	if _, err := io.WriteString(p.Conn, s); err != nil {
		p.t.Fatalf("write held POST: %v", err)
	}
}

// Finish sends the rest of the body and reads the answer.
func (p *Held) Finish() *Result {
	p.t.Helper()
	p.Write(p.Rest)
	return p.Answer()
}

// Answer reads the answer without sending anything more.
func (p *Held) Answer() *Result {
	p.t.Helper()
	res := p.Read()
	if res == nil {
		p.t.Fatal("held POST: no answer")
	}
	return res
}

// Read reads the answer; nil if there is none (the connection failed).
// It may run on any goroutine.
func (p *Held) Read() *Result {
	p.Conn.SetReadDeadline(time.Now().Add(ConnBound))
	resp, err := http.ReadResponse(p.br, nil)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil
	}
	return &Result{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

// WantClosed requires that the server closed the connection: a read ends
// (EOF, or a reset if it had bytes of ours unread), and does not time out.
func (p *Held) WantClosed(what string) {
	p.t.Helper()
	p.Conn.SetReadDeadline(time.Now().Add(ConnBound))
	b, err := p.br.ReadByte()
	var netErr net.Error
	switch {
	case err == nil:
		p.t.Fatalf("%s: connection still open: read %q", what, b)
	case errors.As(err, &netErr) && netErr.Timeout():
		p.t.Fatalf("%s: connection still open after %v", what, ConnBound)
	}
}

// AwaitIndex receives from ch, bounded.
func AwaitIndex(t *testing.T, what string, ch <-chan int) int {
	t.Helper()
	select {
	case i := <-ch:
		return i
	case <-time.After(ConnBound):
		t.Fatalf("%s: none after %v", what, ConnBound)
	}
	return -1
}
