package transport_test

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/mcpruntime/internal/principal"
	"github.com/agenthost/mcpruntime/memdb"
	"github.com/agenthost/mcpruntime/transport"
	ht "github.com/agenthost/mcpruntime/transport/transporttest"
)

var update = flag.Bool("update", false, "rewrite the server frames of testdata/conformance/*.txtar with the endpoint's answers")

// TestConformance replays the wire-level transcripts of
// testdata/conformance/*.txtar against an endpoint over the fake backend
// and requires the endpoint's answers, byte for byte but for the session
// ids: status, the headers that matter, and the body. With -update it
// rewrites the server frames instead.
//
// A transcript is a prose header, then frames (txtar files):
//
//	-- options --          JSON of transport.Options fields (first, optional)
//	-- client --           a request: "METHOD PATH", headers, a blank line, the body;
//	                       its answer is the next "-- server --" frame
//	-- client async N --   a request sent on its own goroutine; "-- await N --"
//	                       later takes its answer (the next server frame)
//	-- client hold N --    a POST whose last body byte is held back until
//	                       "-- finish N --"; the endpoint has admitted it when the
//	                       frame is done
//	-- client stream N --  a GET whose stream stays open; its answer's status and
//	                       headers are the next server frame; "-- close N --" ends it
//	-- do ACTION --        revoke A|B|C (the credential behind a token), started
//	                       (wait until the blocking tool runs), release (the
//	                       reconnect tool answers), updated URI (the backend
//	                       tells ResourceUpdated), listchanged KIND (ListChanged),
//	                       asked N (N asks pending)
//	-- read N K --         the first K events with data stream N carried, each
//	                       its id and data; the next server frame
//
// In client frames {{A}} and {{B}} are provider tokens of (T, A) and (U, A),
// {{C}} a client grant's, {{R}} a revoked one's; {{sessionN}} is the N-th
// session id the endpoint answered, and is written so in server frames.
// The fake backend serves whoami, count_to_three (two progress
// notifications, then its result), log_levels (logs at debug, info,
// warning and error, then answers), reconnect (a progress notification,
// then Output.CloseStream; it answers on "do release"), block (runs
// until cancelled) and, in asks*.txtar, the asking tools of
// asks_fake_test.go; "do asked N"
// waits until the endpoint's sessions hold N pending asks of the client.
func TestConformance(t *testing.T) {
	files, err := filepath.Glob("testdata/conformance/*.txtar")
	if err != nil || len(files) == 0 {
		t.Fatalf("no transcripts: %v", err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txtar"), func(t *testing.T) {
			runTranscript(t, file)
		})
	}
}

// txtar is a parsed transcript: the prose header and its frames.
type txtar struct {
	comment string
	files   []txtarFile
}

type txtarFile struct {
	name string
	data string
}

func parseTxtar(s string) txtar {
	var a txtar
	lines := strings.SplitAfter(s, "\n")
	cur := &a.comment
	for _, l := range lines {
		if name, ok := strings.CutPrefix(strings.TrimRight(l, "\n"), "-- "); ok && strings.HasSuffix(name, " --") {
			a.files = append(a.files, txtarFile{name: strings.TrimSuffix(name, " --")})
			cur = &a.files[len(a.files)-1].data
			continue
		}
		*cur += l
	}
	return a
}

func (a txtar) format() string {
	var b strings.Builder
	b.WriteString(a.comment)
	for _, f := range a.files {
		fmt.Fprintf(&b, "-- %s --\n%s", f.name, f.data)
		if f.data != "" && !strings.HasSuffix(f.data, "\n") {
			b.WriteString("\n")
		}
	}
	return b.String()
}

// transcript is one run: the endpoint, its tokens and what is in flight.
type transcript struct {
	t        *testing.T
	e        *mcpEnv
	tokens   map[string]string // {{A}} → token
	creds    map[string]string // A → credential id
	sessions []string          // ids in the order answered
	async    map[string]*ht.Pending
	held     map[string]*ht.Held
	streams  map[string]*ht.Stream
	blocking *ht.Blocking
}

func runTranscript(t *testing.T, file string) {
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	a := parseTxtar(string(raw))
	var opts transport.Options
	frames := a.files
	if len(frames) > 0 && frames[0].name == "options" {
		if err := json.Unmarshal([]byte(frames[0].data), &opts); err != nil {
			t.Fatalf("options: %v", err)
		}
		frames = frames[1:]
	}
	f := newFake(t)
	f.tool("count_to_three", func(_ context.Context, _ principal.Principal, _ json.RawMessage, out transport.Output) (*mcp.CallToolResult, error) {
		out.Progress(1, 3, "one")
		out.Progress(2, 3, "two")
		return textResult("three"), nil
	})
	f.tool("log_levels", func(_ context.Context, _ principal.Principal, _ json.RawMessage, out transport.Output) (*mcp.CallToolResult, error) {
		for _, l := range []mcp.LoggingLevel{"debug", "info", "warning", "error"} {
			out.Log(l, "fake", map[string]string{"said": string(l)})
		}
		out.Log("loud", "fake", "not a level: never sent")
		return textResult("logged"), nil
	})
	reconnected := make(chan struct{})
	f.tool("reconnect", func(ctx context.Context, _ principal.Principal, _ json.RawMessage, out transport.Output) (*mcp.CallToolResult, error) {
		out.Progress(1, 2, "stream closing")
		out.CloseStream()
		select {
		case <-reconnected:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return textResult("resumed"), nil
	})
	if strings.HasPrefix(filepath.Base(file), "asks") {
		askingTools(f) // only there: the other transcripts list the tools
	}
	tr := &transcript{t: t, tokens: map[string]string{}, creds: map[string]string{},
		async: map[string]*ht.Pending{}, held: map[string]*ht.Held{}, streams: map[string]*ht.Stream{},
		blocking: f.blocking("block", false)}
	tr.tokens["A"], tr.creds["A"] = f.provider("T", "A", 0)
	tr.tokens["B"], tr.creds["B"] = f.provider("U", "A", 0)
	tr.tokens["C"], tr.creds["C"] = f.client("ide", memdb.AccessReadWrite, 0)
	var gone string
	tr.tokens["R"], gone = f.client("gone", memdb.AccessReadOnly, 0)
	f.revoke(gone)
	f.resource("test://watched", "watched")
	f.resource("test://secret", "secret", principal.ProviderNamespace(tr.creds["B"]))
	tr.e = newMCPEnv(t, f, opts)

	var answers []string // the server frames, in order
	for i := 0; i < len(frames); i++ {
		fr := frames[i]
		verb, name, _ := strings.Cut(fr.name, " ")
		switch {
		case fr.name == "server":
			continue // replaced by what the endpoint answers
		case fr.name == "client":
			var want string // the answer's head the transcript expects
			if i+1 < len(frames) && frames[i+1].name == "server" {
				want = frames[i+1].data
			}
			answers = append(answers, tr.render(tr.e.Send(tr.request(fr.data)), want))
		case strings.HasPrefix(fr.name, "client async "):
			name = strings.TrimPrefix(fr.name, "client async ")
			tr.async[name] = tr.e.AsyncSend(tr.request(fr.data))
		case verb == "await":
			answers = append(answers, tr.renderResult(tr.async[name].Await(t, name)))
		case strings.HasPrefix(fr.name, "client hold "):
			name = strings.TrimPrefix(fr.name, "client hold ")
			req := tr.request(fr.data)
			before := tr.e.srv.InFlight()
			b := body(t, req)
			req.Header.Del("Host")
			tr.held[name] = tr.e.HoldPost(req.Header, b, 1)
			tr.e.waitInFlight("held "+name, transport.InFlight{Requests: before.Requests + 1, BodyBytes: before.BodyBytes + int64(len(b))})
		case verb == "finish":
			answers = append(answers, tr.renderResult(tr.held[name].Finish()))
		case strings.HasPrefix(fr.name, "client stream "):
			name = strings.TrimPrefix(fr.name, "client stream ")
			st, res := tr.e.OpenSSE(tr.request(fr.data))
			if st != nil {
				tr.streams[name] = st
				res.Body = nil
			}
			answers = append(answers, tr.renderResult(res))
		case verb == "close":
			tr.streams[name].Close()
		case fr.name == "do started":
			tr.blocking.WaitStarted(t, "the blocking tool")
		case fr.name == "do release":
			close(reconnected)
		case verb == "do" && strings.HasPrefix(name, "updated "):
			tr.e.srv.ResourceUpdated(strings.TrimPrefix(name, "updated "))
		case verb == "do" && strings.HasPrefix(name, "listchanged "):
			tr.e.srv.ListChanged(strings.TrimPrefix(name, "listchanged "))
		case verb == "read":
			stream, count, _ := strings.Cut(name, " ")
			k, err := strconv.Atoi(count)
			if err != nil {
				t.Fatalf("frame %q: read N K", fr.name)
			}
			answers = append(answers, tr.read(stream, k))
		case verb == "do" && strings.HasPrefix(name, "asked "):
			n, err := strconv.Atoi(strings.TrimPrefix(name, "asked "))
			if err != nil {
				t.Fatalf("frame %q: %v", fr.name, err)
			}
			ht.WaitUntil(t, fr.name, func() bool { return tr.e.srv.AsksPending() == n })
		case verb == "do" && strings.HasPrefix(name, "revoke "):
			f.revoke(tr.creds[strings.TrimPrefix(name, "revoke ")])
		default:
			t.Fatalf("frame %q: unknown", fr.name)
		}
	}

	// Put the answers in the server frames, in order: one after each
	// client, await, finish and stream frame.
	var got []txtarFile
	n := 0
	for i, fr := range frames {
		if fr.name == "server" {
			continue
		}
		got = append(got, fr)
		verb, _, _ := strings.Cut(fr.name, " ")
		if fr.name == "client" || verb == "await" || verb == "finish" || verb == "read" || strings.HasPrefix(fr.name, "client stream ") {
			got = append(got, txtarFile{name: "server", data: answers[n]})
			n++
			if i+1 >= len(frames) || frames[i+1].name != "server" {
				if !*update {
					t.Errorf("frame %d (%s) has no server frame after it", i, fr.name)
				}
			}
		}
	}
	out := txtar{comment: a.comment, files: got}
	if len(a.files) > 0 && a.files[0].name == "options" {
		out.files = append([]txtarFile{a.files[0]}, out.files...)
	}
	if *update {
		if err := os.WriteFile(file, []byte(out.format()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if diff := cmp.Diff(a.format(), out.format()); diff != "" {
		t.Errorf("%s: the endpoint's answers differ from the transcript (-want +got):\n%s", file, diff)
	}
}

// read waits until stream name carried k events with data and renders
// them, each as its id and data lines.
func (tr *transcript) read(name string, k int) string {
	tr.t.Helper()
	st := tr.streams[name]
	var events []ht.SSEEvent
	ht.WaitUntil(tr.t, fmt.Sprintf("stream %s: %d events", name, k), func() bool {
		events = events[:0]
		for _, ev := range st.Events() {
			if ev.Data != "" {
				events = append(events, ev)
			}
		}
		return len(events) >= k
	})
	var b strings.Builder
	for _, ev := range events[:k] {
		fmt.Fprintf(&b, "id: %s\ndata: %s\n\n", ev.ID, ev.Data)
	}
	s := b.String()
	for i, id := range tr.sessions {
		s = strings.ReplaceAll(s, id, "{{session"+strconv.Itoa(i+1)+"}}")
	}
	return s
}

// request builds the request of a client frame: "METHOD PATH", headers, a
// blank line, the body; {{X}} replaced.
func (tr *transcript) request(frame string) *http.Request {
	tr.t.Helper()
	frame = tr.expand(frame)
	head, body, _ := strings.Cut(frame, "\n\n")
	lines := strings.Split(strings.TrimRight(head, "\n"), "\n")
	method, path, ok := strings.Cut(lines[0], " ")
	if !ok {
		tr.t.Fatalf("client frame %q: no request line", lines[0])
	}
	h := http.Header{}
	for _, l := range lines[1:] {
		k, v, ok := strings.Cut(l, ": ")
		if !ok {
			tr.t.Fatalf("client frame: header line %q", l)
		}
		h.Add(k, v)
	}
	req := tr.e.NewRequest(context.Background(), method, h, strings.TrimSuffix(body, "\n"))
	u, err := req.URL.Parse(tr.e.TS.URL + path)
	if err != nil {
		tr.t.Fatal(err)
	}
	req.URL = u
	return req
}

func body(t *testing.T, req *http.Request) string {
	t.Helper()
	if req.Body == nil {
		return ""
	}
	b, err := io.ReadAll(req.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func (tr *transcript) expand(s string) string {
	for k, v := range tr.tokens {
		s = strings.ReplaceAll(s, "{{"+k+"}}", v)
	}
	for i, id := range tr.sessions {
		s = strings.ReplaceAll(s, "{{session"+strconv.Itoa(i+1)+"}}", id)
	}
	return s
}

// conformanceHeaders are the headers a transcript shows: those the
// contract says something about.
var conformanceHeaders = []string{"Allow", "Cache-Control", "Connection", "Content-Type", "Mcp-Session-Id", "Retry-After", "Www-Authenticate"}

// render renders resp, reading its body to the end — unless resp is an
// event stream where want, the server frame the transcript expects, is
// not one with resp's status: such a stream may never end (a foreign GET
// let through would carry the owner's stream), so its body is left unread
// and the diff with want fails at once instead of the read hanging.
func (tr *transcript) render(resp *http.Response, want string) string {
	tr.t.Helper()
	defer resp.Body.Close()
	h := resp.Header.Clone()
	if resp.Close && h.Get("Connection") == "" {
		h.Set("Connection", "close") // net/http's client takes the header into resp.Close
	}
	var b []byte
	if !*update && strings.HasPrefix(h.Get("Content-Type"), "text/event-stream") && !expectsStream(want, resp.StatusCode) {
		b = []byte("(an unexpected event stream: body not read)\n")
	} else {
		var err error
		if b, err = io.ReadAll(resp.Body); err != nil {
			tr.t.Fatal(err)
		}
	}
	return tr.renderResult(&ht.Result{Status: resp.StatusCode, Header: h, Body: b})
}

// expectsStream reports whether the server frame want is an answer with
// status and an event stream's Content-Type.
func expectsStream(want string, status int) bool {
	head, _, _ := strings.Cut(want, "\n\n")
	lines := strings.Split(head, "\n")
	return strings.HasPrefix(lines[0], strconv.Itoa(status)+" ") &&
		slices.ContainsFunc(lines[1:], func(l string) bool { return strings.HasPrefix(l, "Content-Type: text/event-stream") })
}

func (tr *transcript) renderResult(res *ht.Result) string {
	if sid := res.Header.Get("Mcp-Session-Id"); sid != "" && !slices.Contains(tr.sessions, sid) {
		tr.sessions = append(tr.sessions, sid)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d %s\n", res.Status, http.StatusText(res.Status))
	for _, k := range conformanceHeaders {
		for _, v := range res.Header.Values(k) {
			fmt.Fprintf(&b, "%s: %s\n", k, v)
		}
	}
	if len(res.Body) > 0 {
		b.WriteString("\n")
		sc := bufio.NewScanner(strings.NewReader(string(res.Body)))
		for sc.Scan() {
			b.WriteString(sc.Text() + "\n")
		}
	}
	s := b.String()
	for i, id := range tr.sessions {
		s = strings.ReplaceAll(s, id, "{{session"+strconv.Itoa(i+1)+"}}")
	}
	return s
}
