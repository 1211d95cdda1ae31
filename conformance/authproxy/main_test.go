package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
)

// TestMain fails the package if any goroutine outlives its tests: once run
// returns, the proxy's listener, handlers and upstream connections are gone.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const testToken = "mcprt_test-token-0123456789"

// startProxy runs the proxy in-process against target and returns its URL
// and a stop function that ends it and checks run's exit status; stop also
// runs when the test ends.
func startProxy(t *testing.T, target string, extra ...string) (proxyURL string, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	outR, outW := io.Pipe()
	var stderr syncBuffer
	done := make(chan int, 1)
	args := append([]string{"-target", target}, extra...)
	go func() {
		code := run(ctx, args, env(map[string]string{tokenEnv: testToken}), outW, &stderr)
		outW.Close()
		done <- code
	}()
	line, err := bufio.NewReader(outR).ReadString('\n')
	if err != nil {
		cancel()
		t.Fatalf("proxy printed no URL line (%v); stderr: %s", err, stderr.String())
	}
	go io.Copy(io.Discard, outR) //nolint:errcheck // nothing more is printed; keep the pipe drained
	var got struct{ URL string }
	if err := json.Unmarshal([]byte(line), &got); err != nil {
		t.Fatalf("URL line %q: %v", line, err)
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if code := <-done; code != 0 {
				t.Errorf("run exited %d after cancel, want 0; stderr: %s", code, stderr.String())
			}
		})
	}
	t.Cleanup(stop)
	return got.URL, stop
}

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// syncBuffer is a bytes.Buffer safe for the proxy's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// seen is what the upstream received of one request.
type seen struct {
	Method, URI, Host string
	Header            http.Header
	Body              string
}

// TestForwardsBytesAndSetsAuthorization: the upstream receives the
// client's method, path, query, Host, Origin, headers and body unchanged,
// with only Authorization set (replacing the client's) and nothing added;
// the client receives the upstream's status, headers and bytes unchanged,
// gzip included.
func TestForwardsBytesAndSetsAuthorization(t *testing.T) {
	gz := []byte{0x1f, 0x8b, 0x08, 0x00, 0xde, 0xad, 0xbe, 0xef} // opaque bytes: never decoded
	got := make(chan seen, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got <- seen{r.Method, r.RequestURI, r.Host, r.Header.Clone(), string(body)}
		w.Header().Set("Mcp-Session-Id", "mcps_abc")
		w.Header()["Www-Authenticate"] = []string{`Bearer error="invalid_token"`, `Basic realm="x"`}
		w.Header().Set("Content-Encoding", "gzip")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTeapot)
		w.Write(gz)
	}))
	defer up.Close()
	proxyURL, _ := startProxy(t, up.URL+"/mcp")
	if want := "http://127.0.0.1:"; !strings.HasPrefix(proxyURL, want) || !strings.HasSuffix(proxyURL, "/mcp") {
		t.Fatalf("proxy URL %q, want %s…/mcp", proxyURL, want)
	}

	body := `{"jsonrpc":"2.0","id":1,"method":"ping"}`
	req, _ := http.NewRequest(http.MethodPost, proxyURL+"?a=1&b=%2F", strings.NewReader(body))
	req.Host = "evil.example.com:3000"
	req.Header.Set("Origin", "http://evil.example.com")
	req.Header.Set("Authorization", "Bearer the-clients-own")
	req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	req.Header["Last-Event-ID"] = []string{"s1-7"}
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Connection", "keep-alive, X-Hop")
	req.Header.Set("X-Hop", "per-connection")
	req.Header.Set("User-Agent", "conformance-suite/1")
	client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	defer client.CloseIdleConnections()
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resBody, _ := io.ReadAll(res.Body)
	res.Body.Close()

	s := <-got
	if s.Method != http.MethodPost || s.URI != "/mcp?a=1&b=%2F" || s.Host != "evil.example.com:3000" || s.Body != body {
		t.Errorf("upstream saw %s %s Host %q body %q, want POST /mcp?a=1&b=%%2F Host evil.example.com:3000 body %q",
			s.Method, s.URI, s.Host, s.Body, body)
	}
	wantHeader := http.Header{
		"Accept":               {"application/json, text/event-stream"},
		"Authorization":        {"Bearer " + testToken},
		"Content-Length":       {"40"},
		"Last-Event-Id":        {"s1-7"},
		"Mcp-Protocol-Version": {"2025-11-25"},
		"Origin":               {"http://evil.example.com"},
		"User-Agent":           {"conformance-suite/1"},
	}
	if diff := cmp.Diff(wantHeader, s.Header); diff != "" {
		t.Errorf("upstream request headers (-want +got):\n%s", diff)
	}

	if res.StatusCode != http.StatusTeapot || !bytes.Equal(resBody, gz) {
		t.Errorf("client got %d %x, want %d %x", res.StatusCode, resBody, http.StatusTeapot, gz)
	}
	for name, want := range map[string][]string{
		"Mcp-Session-Id":   {"mcps_abc"},
		"Www-Authenticate": {`Bearer error="invalid_token"`, `Basic realm="x"`},
		"Content-Encoding": {"gzip"},
		"Content-Type":     {"application/json"},
		"Content-Length":   {"8"},
	} {
		if diff := cmp.Diff(want, res.Header.Values(name)); diff != "" {
			t.Errorf("client response header %s (-want +got):\n%s", name, diff)
		}
	}
}

// TestNoUserAgentAdded: a request without User-Agent or Accept-Encoding
// reaches the upstream without them (net/http's Transport would add Go's
// User-Agent and gzip).
func TestNoUserAgentAdded(t *testing.T) {
	got := make(chan http.Header, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Clone()
	}))
	defer up.Close()
	proxyURL, _ := startProxy(t, up.URL+"/mcp")
	req, _ := http.NewRequest(http.MethodGet, proxyURL, nil)
	req.Header["User-Agent"] = []string{""} // our client sends neither
	client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	defer client.CloseIdleConnections()
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	h := <-got
	if _, ok := h["User-Agent"]; ok {
		t.Errorf("upstream got User-Agent %q, want none", h.Get("User-Agent"))
	}
	if _, ok := h["Accept-Encoding"]; ok {
		t.Errorf("upstream got Accept-Encoding %q, want none", h.Get("Accept-Encoding"))
	}
}

// TestSSEStreamsThroughIncrementally: an event the upstream has written
// and flushed reaches the client while the upstream's handler is still
// running, waiting for the test to have read it. A proxy that buffered the
// response would hold the event until the handler returned, which it never
// does on its own: the read would fail at the client's deadline.
func TestSSEStreamsThroughIncrementally(t *testing.T) {
	const events = 3
	read := make(chan int) // the test read event i
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		for i := range events {
			io.WriteString(w, "id: s1-"+string(rune('0'+i))+"\nevent: message\ndata: {\"n\":"+string(rune('0'+i))+"}\n\n")
			w.(http.Flusher).Flush()
			select {
			case <-read:
			case <-r.Context().Done():
				return
			}
		}
	}))
	defer up.Close()
	proxyURL, _ := startProxy(t, up.URL+"/mcp")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, proxyURL, nil)
	req.Header.Set("Accept", "text/event-stream")
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	res, err := client.Do(req)
	if err != nil {
		t.Fatalf("GET through the proxy: %v (headers not flushed before the first event?)", err)
	}
	defer res.Body.Close()
	if ct := res.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q, want text/event-stream", ct)
	}
	br := bufio.NewReader(res.Body)
	for i := range events {
		var ev strings.Builder
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				t.Fatalf("event %d: %v after %q: the proxy held it back", i, err, ev.String())
			}
			ev.WriteString(line)
			if line == "\n" {
				break
			}
		}
		want := "id: s1-" + string(rune('0'+i)) + "\nevent: message\ndata: {\"n\":" + string(rune('0'+i)) + "}\n\n"
		if ev.String() != want {
			t.Fatalf("event %d = %q, want %q", i, ev.String(), want)
		}
		read <- i // only now may the upstream write the next one
	}
	if rest, err := io.ReadAll(br); err != nil || len(rest) != 0 {
		t.Errorf("after the last event: %q, %v; want EOF", rest, err)
	}
}

// TestClientDisconnectCancelsUpstream: when the client goes away, the
// upstream request's context ends (the server sees the disconnect).
func TestClientDisconnectCancelsUpstream(t *testing.T) {
	started, cancelled := make(chan struct{}), make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		close(started)
		<-r.Context().Done()
		close(cancelled)
	}))
	defer up.Close()
	proxyURL, _ := startProxy(t, up.URL+"/mcp")
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, proxyURL, nil)
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	<-started
	cancel()
	res.Body.Close()
	select {
	case <-cancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream request was not cancelled after the client went away")
	}
}

// TestDumpRedactsToken: -dump records each exchange, request and response,
// with Authorization redacted and the token nowhere in the file.
func TestDumpRedactsToken(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "event: message\ndata: {\"result\":{}}\n\n")
	}))
	defer up.Close()
	file := filepath.Join(t.TempDir(), "traffic.jsonl")
	proxyURL, stop := startProxy(t, up.URL+"/mcp", "-dump", file)
	client := &http.Client{Transport: &http.Transport{}}
	res, err := client.Post(proxyURL, "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
	if err != nil {
		t.Fatal(err)
	}
	io.ReadAll(res.Body)
	res.Body.Close()
	client.CloseIdleConnections()
	stop() // the dump is complete once run returned

	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(raw, []byte(testToken)) {
		t.Fatalf("the dump holds the token:\n%s", raw)
	}
	var evs []string
	var auth string
	for _, l := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var e event
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("dump line %q: %v", l, err)
		}
		if e.ID != 1 {
			t.Errorf("dump line %q: id %d, want 1", l, e.ID)
		}
		evs = append(evs, e.Ev)
		if e.Ev == "request" {
			auth = e.Header.Get("Authorization")
		}
		if e.Ev == "response-body" && (e.Data == nil || *e.Data != "event: message\ndata: {\"result\":{}}\n\n") {
			t.Errorf("response-body event %q", l)
		}
	}
	if diff := cmp.Diff([]string{"request", "request-body", "response", "response-body", "end"}, evs); diff != "" {
		t.Errorf("dump events (-want +got):\n%s", diff)
	}
	if auth != "Bearer [redacted]" {
		t.Errorf("dumped Authorization %q, want Bearer [redacted]", auth)
	}
}

// TestListensOnLoopbackOnly: the proxy binds 127.0.0.1 by default, and
// refuses to listen on, or forward to, anything but a loopback IP literal.
func TestListensOnLoopbackOnly(t *testing.T) {
	proxyURL, _ := startProxy(t, "http://127.0.0.1:9/mcp")
	host, _, err := net.SplitHostPort(strings.TrimPrefix(strings.TrimSuffix(proxyURL, "/mcp"), "http://"))
	if err != nil || host != "127.0.0.1" {
		t.Errorf("default listener %q (%v), want 127.0.0.1", proxyURL, err)
	}

	tests := []struct {
		name string
		args []string
		env  map[string]string
		want string // in stderr
	}{
		{"all interfaces", []string{"-listen", "0.0.0.0:0", "-target", "http://127.0.0.1:9/mcp"}, nil, `address "0.0.0.0:0"`},
		{"no host", []string{"-listen", ":0", "-target", "http://127.0.0.1:9/mcp"}, nil, `address ":0"`},
		{"a name", []string{"-listen", "localhost:0", "-target", "http://127.0.0.1:9/mcp"}, nil, `address "localhost:0"`},
		{"an outside address", []string{"-listen", "192.0.2.1:0", "-target", "http://127.0.0.1:9/mcp"}, nil, `address "192.0.2.1:0"`},
		{"outside target", []string{"-target", "http://192.0.2.1:80/mcp"}, nil, `address "192.0.2.1:80"`},
		{"named target", []string{"-target", "http://localhost:80/mcp"}, nil, `address "localhost:80"`},
		{"https target", []string{"-target", "https://127.0.0.1:80/mcp"}, nil, "want http://"},
		{"no target", nil, nil, "-target is required"},
		{"no token", []string{"-target", "http://127.0.0.1:9/mcp"}, map[string]string{}, "$AUTHPROXY_TOKEN is empty"},
		{"token with a space", []string{"-target", "http://127.0.0.1:9/mcp"}, map[string]string{tokenEnv: "Bearer x"}, "white space"},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			e := test.env
			if e == nil {
				e = map[string]string{tokenEnv: testToken}
			}
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), test.args, env(e), &stdout, &stderr)
			if code != 2 || stdout.Len() != 0 || !strings.Contains(stderr.String(), test.want) {
				t.Errorf("run(%q) = %d, stdout %q, stderr %q; want 2, nothing, %q", test.args, code, stdout.String(), stderr.String(), test.want)
			}
			if strings.Contains(stderr.String(), testToken) {
				t.Errorf("stderr holds the token: %q", stderr.String())
			}
		})
	}
}

// TestUpstreamDownIs502: an unreachable server is a 502 from the proxy,
// and its message names neither the token nor the upstream's error detail.
func TestUpstreamDownIs502(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close() // nothing listens there now
	proxyURL, _ := startProxy(t, "http://"+dead+"/mcp")
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	res, err := client.Get(proxyURL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusBadGateway || strings.Contains(string(body), testToken) {
		t.Errorf("got %d %q, want 502 without the token", res.StatusCode, body)
	}
}

// TestResponseBeforeRequestBodyEnds: the server may answer (headers and a
// first SSE event) before the proxy has forwarded the whole request body,
// and the rest of the body still reaches it. Without full duplex, net/http
// consumes and closes a request body the moment a handler writes its
// headers, so the proxy's own WriteHeader either waited for the rest of the
// body (which this client sends only after it saw the answer: a deadlock)
// or, when the body had arrived, made the upstream Transport's final read
// of it fail and close the upstream connection mid-stream: the race that
// lost SSE responses in the conformance suite's sampling and elicitation
// scenarios against the go-sdk server.
func TestResponseBeforeRequestBodyEnds(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.NewResponseController(w).EnableFullDuplex() // this upstream answers first, then reads
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, "data: first\n\n")
		w.(http.Flusher).Flush()
		body, err := io.ReadAll(r.Body)
		if err != nil {
			io.WriteString(w, "data: read error "+err.Error()+"\n\n")
			return
		}
		io.WriteString(w, "data: got "+string(body)+"\n\n")
	}))
	defer up.Close()
	proxyURL, _ := startProxy(t, up.URL+"/mcp")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pr, pw := io.Pipe()
	defer pw.Close()
	context.AfterFunc(ctx, func() { pw.CloseWithError(ctx.Err()) }) // the client's Transport waits for its body
	const half1, half2 = `{"jsonrpc":"2.0",`, `"id":1,"method":"ping"}`
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, proxyURL, pr)
	req.ContentLength = int64(len(half1 + half2))
	wrote := make(chan error, 1)
	go func() {
		_, err := io.WriteString(pw, half1)
		wrote <- err
	}()
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	res, err := client.Do(req)
	if err != nil {
		t.Fatalf("POST through the proxy: %v (the answer was held until the body ended)", err)
	}
	defer res.Body.Close()
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(res.Body)
	readEvent := func() string {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("reading an event: %v", err)
		}
		br.ReadString('\n') // the blank line
		return line
	}
	if got := readEvent(); got != "data: first\n" {
		t.Fatalf("first event %q, want data: first", got)
	}
	if _, err := io.WriteString(pw, half2); err != nil { // only now the rest of the body
		t.Fatal(err)
	}
	pw.Close()
	if got, want := readEvent(), "data: got "+half1+half2+"\n"; got != want {
		t.Fatalf("second event %q, want %q: the body did not reach the upstream whole", got, want)
	}
}
