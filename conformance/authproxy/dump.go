package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"time"
	"unicode/utf8"
)

// dumper writes the proxied traffic as JSON lines, one event a line, in the
// order they happen:
//
//	{"id":1,"ms":0.41,"ev":"request","method":"POST","uri":"/mcp","host":"127.0.0.1:PORT","header":{…}}
//	{"id":1,"ms":0.52,"ev":"request-body","data":"{\"jsonrpc\":…}"}
//	{"id":1,"ms":1.30,"ev":"response","status":200,"header":{…}}
//	{"id":1,"ms":1.31,"ev":"response-body","data":"event: message\n…"}
//	{"id":1,"ms":1.33,"ev":"end"}                       (or "err": why it ended early)
//
// id numbers the exchanges; ms is the time since the proxy started. A
// request's headers are those sent upstream, Authorization shown as
// "Bearer [redacted]". data holds each chunk as it passed, or data_b64 when
// the chunk is not UTF-8. A nil *dumper dumps nothing.
type dumper struct {
	start time.Time
	mu    sync.Mutex // guards the fields below
	w     io.Writer
	ids   int
}

// event is one line of the dump.
type event struct {
	ID      int         `json:"id"`
	Ms      float64     `json:"ms"`
	Ev      string      `json:"ev"`
	Method  string      `json:"method,omitempty"`
	URI     string      `json:"uri,omitempty"`
	Host    string      `json:"host,omitempty"`
	Remote  string      `json:"remote,omitempty"`
	Status  int         `json:"status,omitempty"`
	Header  http.Header `json:"header,omitempty"`
	Data    *string     `json:"data,omitempty"`
	DataB64 string      `json:"data_b64,omitempty"`
	Err     string      `json:"err,omitempty"`
}

// next numbers a new exchange (0 when not dumping).
func (d *dumper) next() int {
	if d == nil {
		return 0
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.ids++
	return d.ids
}

func (d *dumper) write(e event) {
	d.mu.Lock()
	defer d.mu.Unlock()
	e.Ms = float64(time.Since(d.start).Microseconds()) / 1000
	line, _ := json.Marshal(e)
	_, _ = d.w.Write(append(line, '\n'))
}

func (d *dumper) request(id int, r *http.Request) {
	if d == nil {
		return
	}
	h := r.Header.Clone()
	if h.Get("Authorization") != "" {
		h.Set("Authorization", "Bearer [redacted]")
	}
	d.write(event{ID: id, Ev: "request", Method: r.Method, URI: r.URL.RequestURI(), Host: r.Host, Remote: r.RemoteAddr, Header: h})
}

func (d *dumper) response(id int, res *http.Response) {
	if d == nil {
		return
	}
	d.write(event{ID: id, Ev: "response", Status: res.StatusCode, Header: res.Header.Clone()})
}

func (d *dumper) chunk(id int, ev string, b []byte) {
	if d == nil {
		return
	}
	e := event{ID: id, Ev: ev}
	if utf8.Valid(b) {
		s := string(b)
		e.Data = &s
	} else {
		e.DataB64 = base64.StdEncoding.EncodeToString(b)
	}
	d.write(e)
}

func (d *dumper) end(id int, err error, client context.Context) {
	if d == nil {
		return
	}
	e := event{ID: id, Ev: "end"}
	if err != nil {
		e.Err = err.Error()
	}
	if client.Err() != nil {
		e.Err += " (client gone)"
	}
	d.write(e)
}

// dumpReader dumps a request body as the upstream request reads it.
type dumpReader struct {
	io.ReadCloser
	d  *dumper
	id int
}

func (r *dumpReader) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	if n > 0 {
		r.d.chunk(r.id, "request-body", p[:n])
	}
	return n, err
}
