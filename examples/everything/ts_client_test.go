package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/agenthost/mcpruntime/internal/clienttest"
)

// tsClientDir is the npm project of the TypeScript SDK client, installed
// from its lockfile by scripts/test-deps.sh (make test runs it).
const tsClientDir = "../../e2e/oauth-client"

// What e2e/oauth-client/features.mjs's handlers answer.
const (
	tsElicitedResult = "Elicitation result: action=accept, content=map[email:ts-sdk-user@example.test username:ts-sdk-user]"
	tsSampled        = "Paris, answered the TypeScript SDK client"
	tsRoot           = "file:///tmp/ts-sdk-root"
)

// tsLine is one line of features.mjs's transcript: the step and what it got.
type tsLine struct {
	Step            string `json:"step"`
	Result          string `json:"result"`
	Message         string `json:"message"`
	ProtocolVersion string `json:"protocolVersion"`
	Capabilities    struct {
		Completions *struct{} `json:"completions"`
		Resources   struct {
			Subscribe bool `json:"subscribe"`
		} `json:"resources"`
	} `json:"capabilities"`
	Resources []struct {
		URI      string `json:"uri"`
		MIMEType string `json:"mimeType"`
	} `json:"resources"`
	Contents []struct {
		URI      string  `json:"uri"`
		MIMEType string  `json:"mimeType"`
		Text     *string `json:"text"`
		Blob     *string `json:"blob"`
	} `json:"contents"`
	ResourceTemplates []struct {
		URITemplate string `json:"uriTemplate"`
	} `json:"resourceTemplates"`
	Answer  map[string]any `json:"answer"`
	URIs    []string       `json:"uris"`
	Prompts []struct {
		Name      string `json:"name"`
		Arguments []struct {
			Name     string `json:"name"`
			Required bool   `json:"required"`
		} `json:"arguments"`
	} `json:"prompts"`
	Prompt struct {
		Messages []tsMessage `json:"messages"`
	} `json:"prompt"`
	Completion struct {
		Values []string `json:"values"`
		Total  int      `json:"total"`
	} `json:"completion"`
	// A request of the server that a handler of the client answered.
	Asked  string `json:"asked"`
	Params struct {
		Mode            string         `json:"mode"`
		Message         string         `json:"message"`
		RequestedSchema map[string]any `json:"requestedSchema"`
		Messages        []tsMessage    `json:"messages"`
		MaxTokens       int            `json:"maxTokens"`
	} `json:"params"`
	Listed []struct {
		Name         string         `json:"name"`
		OutputSchema bool           `json:"outputSchema"`
		Annotations  map[string]any `json:"annotations"`
	} `json:"listed"`
	Tool *struct {
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
		StructuredContent map[string]any `json:"structuredContent"`
		IsError           bool           `json:"isError"`
	} `json:"tool"`
}

type tsMessage struct {
	Role    string `json:"role"`
	Content struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
}

// startEverything builds this command, starts it on a free loopback port
// and returns its announcement; the cleanup stops it by its PID (SIGTERM)
// and fails the test if it did not exit cleanly or reported a data race.
func startEverything(t *testing.T) announcement {
	t.Helper()
	bin := clienttest.Build(t, ".", "everything")
	cmd := exec.Command(bin, "-listen", "127.0.0.1:0")
	var stderr bytes.Buffer // read only after Wait
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines, drained := make(chan string, 1), make(chan struct{})
	go func() {
		defer close(drained)
		r := bufio.NewReader(stdout)
		line, _ := r.ReadString('\n')
		lines <- line
		io.Copy(io.Discard, r)
	}()
	t.Cleanup(func() {
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Errorf("SIGTERM to everything (pid %d): %v", cmd.Process.Pid, err)
		}
		select {
		case <-drained:
		case <-time.After(time.Minute): // detects a hang only
			t.Errorf("everything (pid %d) did not exit within a minute of SIGTERM; killing it", cmd.Process.Pid)
			cmd.Process.Kill()
			<-drained
		}
		err := cmd.Wait()
		if err != nil || strings.Contains(stderr.String(), "DATA RACE") {
			t.Errorf("everything exited with %v; its stderr:\n%s", err, stderr.String())
		} else if stderr.Len() > 0 {
			t.Logf("everything's stderr:\n%s", stderr.String())
		}
	})
	var line string
	select {
	case line = <-lines:
	case <-time.After(2 * time.Minute): // detects a hang only
		t.Fatal("everything printed no announcement within 2 minutes")
	}
	var a announcement
	if err := json.Unmarshal([]byte(line), &a); err != nil || a.URL == "" || a.Token == "" {
		t.Fatalf("announcement %q: %v", line, err)
	}
	return a
}

// TestTypeScriptSDKFeatures: the official TypeScript SDK client
// (@modelcontextprotocol/sdk, pinned in e2e/oauth-client/package-lock.json;
// e2e/oauth-client/features.mjs) against this command over Streamable HTTP
// with the announced bearer token, in a 2025-11-25 session: resources
// (list, read of text and of a blob, templates and a template's read,
// subscribe and the update that follows), prompts (list, get with and
// without arguments), completion, and the server asking the client on a
// tool call's stream — elicitation/create, sampling/createMessage and
// roots/list — with the client's answers in the tools' results. The
// transcript is logged and its content checked here.
func TestTypeScriptSDKFeatures(t *testing.T) {
	node, err := filepath.Abs(filepath.Join(tsClientDir, "node_modules", ".bin", "node"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(tsClientDir, "node_modules", "@modelcontextprotocol", "sdk")); err != nil {
		t.Fatalf("the TypeScript SDK is not installed (%v): run scripts/test-deps.sh, as make test does", err)
	}
	if _, err := os.Stat(node); err != nil {
		t.Fatalf("node is not installed (%v): run scripts/test-deps.sh, as make test does", err)
	}
	a := startEverything(t)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // detects a hang only
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "features.mjs")
	cmd.Dir = tsClientDir
	cmd.Env = []string{"MCP_URL=" + a.URL, "MCP_TOKEN=" + a.Token, "PATH=" + os.Getenv("PATH")}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	t.Logf("transcript of the TypeScript SDK client:\n%s", out)
	steps := map[string][]tsLine{}
	var last tsLine
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		last = tsLine{}
		if err := json.Unmarshal(sc.Bytes(), &last); err != nil {
			t.Errorf("transcript line %q: %v", sc.Text(), err)
		}
		steps[last.Step] = append(steps[last.Step], last)
	}
	if err != nil || last.Result != "ok" {
		t.Fatalf("features.mjs: %v, last line %+v\nstderr:\n%s", err, last, stderr.String())
	}
	// one returns the only line of a step.
	one := func(step string) tsLine {
		t.Helper()
		if ls := steps[step]; len(ls) == 1 {
			return ls[0]
		}
		t.Errorf("step %q: %d lines, want 1", step, len(steps[step]))
		return tsLine{}
	}
	// content returns the only content of a resources/read step.
	content := func(step string) (uri, mime, text string, blob *string) {
		t.Helper()
		l := one(step)
		if len(l.Contents) != 1 {
			t.Errorf("%s: %d contents, want 1", step, len(l.Contents))
			return
		}
		c := l.Contents[0]
		if c.Text != nil {
			text = *c.Text
		}
		return c.URI, c.MIMEType, text, c.Blob
	}
	// asked returns what a tool step's server request was and the tool's
	// text: the request is answered before the result comes.
	asked := func(step, method string) (tsLine, string) {
		t.Helper()
		ls := steps[step]
		if len(ls) != 2 || ls[0].Asked != method || ls[1].Tool == nil {
			t.Errorf("step %q = %+v, want one %s, then the tool's result", step, ls, method)
			return tsLine{}, ""
		}
		res := ls[1].Tool
		if res.IsError || len(res.Content) != 1 || res.Content[0].Type != "text" {
			t.Errorf("%s: tool result %+v, want one text", step, res)
			return ls[0], ""
		}
		return ls[0], res.Content[0].Text
	}

	if c := one("connect"); c.ProtocolVersion != "2025-11-25" || !c.Capabilities.Resources.Subscribe || c.Capabilities.Completions == nil {
		t.Errorf("connect: protocol %q, capabilities %+v; want 2025-11-25, resources.subscribe, completions", c.ProtocolVersion, c.Capabilities)
	}

	listed := map[string]string{}
	for _, r := range one("resources/list").Resources {
		listed[r.URI] = r.MIMEType
	}
	for uri, mime := range map[string]string{"test://static-text": "text/plain", "test://static-binary": "image/png", watchedURI: "text/plain"} {
		if listed[uri] != mime {
			t.Errorf("resources/list: %s has MIME type %q, want %q (listed: %v)", uri, listed[uri], mime, listed)
		}
	}
	if uri, mime, text, blob := content("resources/read text"); uri != "test://static-text" || mime != "text/plain" ||
		text != "This is the content of the static text resource." || blob != nil {
		t.Errorf("read test://static-text = %s %s %q, blob %v", uri, mime, text, blob)
	}
	if uri, mime, text, blob := content("resources/read blob"); uri != "test://static-binary" || mime != "image/png" || text != "" || blob == nil {
		t.Errorf("read test://static-binary = %s %s %q, blob %v; want a blob", uri, mime, text, blob)
	} else if got, err := base64.StdEncoding.DecodeString(*blob); err != nil || !bytes.Equal(got, pngData) {
		t.Errorf("read test://static-binary: blob %q (%v), want the fixture's PNG", *blob, err)
	}
	var templates []string
	for _, rt := range one("resources/templates/list").ResourceTemplates {
		templates = append(templates, rt.URITemplate)
	}
	if !slices.Contains(templates, "test://template/{id}/data") {
		t.Errorf("resources/templates/list = %v, want test://template/{id}/data among them", templates)
	}
	uri, mime, text, _ := content("resources/read template")
	var data map[string]any
	if err := json.Unmarshal([]byte(text), &data); err != nil || uri != "test://template/ts-42/data" || mime != "application/json" ||
		!cmp.Equal(data, map[string]any{"id": "ts-42", "templateTest": true, "data": "Data for ID: ts-42"}) {
		t.Errorf("read test://template/ts-42/data = %s %s %q (%v)", uri, mime, text, err)
	}
	if s := one("resources/subscribe"); s.Answer == nil {
		t.Errorf("resources/subscribe answered %+v, want an empty result", s)
	}
	if u := one("notifications/resources/updated"); len(u.URIs) == 0 || slices.ContainsFunc(u.URIs, func(s string) bool { return s != watchedURI }) {
		t.Errorf("notifications/resources/updated for %v, want %s only", u.URIs, watchedURI)
	}
	if s := one("resources/unsubscribe"); s.Answer == nil {
		t.Errorf("resources/unsubscribe answered %+v, want an empty result", s)
	}

	prompts := map[string][]string{}
	for _, p := range one("prompts/list").Prompts {
		var args []string
		for _, a := range p.Arguments {
			args = append(args, a.Name+map[bool]string{true: " (required)"}[a.Required])
		}
		prompts[p.Name] = args
	}
	for _, name := range wantPrompts {
		if _, ok := prompts[name]; !ok {
			t.Errorf("prompts/list lacks %s (listed: %v)", name, prompts)
		}
	}
	if diff := cmp.Diff([]string{"arg1 (required)", "arg2 (required)"}, prompts["test_prompt_with_arguments"]); diff != "" {
		t.Errorf("test_prompt_with_arguments's arguments (-want +got):\n%s", diff)
	}
	userText := func(text string) []tsMessage {
		m := tsMessage{Role: "user"}
		m.Content.Type, m.Content.Text = "text", text
		return []tsMessage{m}
	}
	if diff := cmp.Diff(userText("This is a simple prompt for testing."), one("prompts/get simple").Prompt.Messages); diff != "" {
		t.Errorf("prompts/get test_simple_prompt (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(userText("Prompt with arguments: arg1='alpha', arg2='beta'"), one("prompts/get arguments").Prompt.Messages); diff != "" {
		t.Errorf("prompts/get test_prompt_with_arguments (-want +got):\n%s", diff)
	}
	if c := one("completion/complete").Completion; !cmp.Equal(c.Values, []string{"testValue1", "testValue2"}) || c.Total != 2 {
		t.Errorf("completion/complete of arg1 %q = %+v, want testValue1, testValue2", "test", c)
	}

	listedTools := map[string]int{}
	for i, tl := range one("tools/list").Listed {
		listedTools[tl.Name] = i
	}
	if i, ok := listedTools["report"]; !ok || !one("tools/list").Listed[i].OutputSchema {
		t.Errorf("tools/list: report with an outputSchema missing (listed %v)", listedTools)
	}
	if i, ok := listedTools["deploy"]; !ok || one("tools/list").Listed[i].Annotations["readOnlyHint"] == true {
		t.Errorf("tools/list: deploy missing or read-only (listed %v)", listedTools)
	}
	if r := one("outputSchema").Tool; r == nil || r.IsError || !cmp.Equal(r.StructuredContent, map[string]any{"words": 4.0, "first": "ship"}) {
		t.Errorf("report = %+v, want structured content {words: 4, first: ship}", r)
	}
	if r := one("act").Tool; r == nil || r.IsError || len(r.Content) != 1 || r.Content[0].Text != "deployed main" {
		t.Errorf("deploy = %+v, want deployed main", r)
	}

	if q, text := asked("elicitation", "elicitation/create"); q.Params.Message != "Who are you, TypeScript client?" || q.Params.Mode != "form" ||
		!cmp.Equal(q.Params.RequestedSchema["required"], []any{"username"}) {
		t.Errorf("elicitation/create params %+v, want the tool's message and schema, form mode", q.Params)
	} else if text != tsElicitedResult {
		t.Errorf("test_elicitation = %q, want %q (the client's answer)", text, tsElicitedResult)
	}
	if q, text := asked("sampling", "sampling/createMessage"); !cmp.Equal(q.Params.Messages, userText("What is the capital of France?")) || q.Params.MaxTokens != 100 {
		t.Errorf("sampling/createMessage params %+v, want the tool's prompt, maxTokens 100", q.Params)
	} else if want := "LLM response: " + tsSampled; text != want {
		t.Errorf("test_sampling = %q, want %q (the client's answer)", text, want)
	}
	if _, text := asked("roots", "roots/list"); text != "Client exposed 1 root(s): "+tsRoot {
		t.Errorf("test_input_required_result_list_roots = %q, want the client's one root %s", text, tsRoot)
	}
}
