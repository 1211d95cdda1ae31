package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// adminCmd is `runtime admin …`: one HTTP request to the admin API per
// command, its JSON answer printed on stdout. A non-2xx answer prints the
// API's error on stderr and exits 1.
type adminCmd struct {
	AdminURL       string        `config:"" default:"http://127.0.0.1:7332" placeholder:"URL" help:"Base URL of the admin API."`
	AdminTokenFile string        `config:"" default:"${default_token_file}" placeholder:"FILE" help:"File holding the admin token; read when $RUNTIME_ADMIN_TOKEN is not set."`
	Field          string        `short:"f" placeholder:"NAME" help:"Print only this top-level field of the answer (a string without quotes), for scripts."`
	Verbose        bool          `short:"v" help:"Print each request and its HTTP status on stderr."`
	Timeout        time.Duration `default:"120s" help:"Bound on each request (longer than the server's bound on a provider open, 90s by default)."`

	Instance        instanceCmds        `cmd:"" help:"Provider instances."`
	Thread          threadCmds          `cmd:"" help:"Threads."`
	ProviderSession providerSessionCmds `cmd:"" name:"provider-session" help:"Provider sessions (an agent process or connection) of a (thread, instance) pair."`
	Run             runCmds             `cmd:"" help:"Runs of a thread."`
	Client          clientCmds          `cmd:"" help:"Client grants (hosts' own MCP clients)."`
	MCPSessions     mcpSessionsCmd      `cmd:"" name:"mcp-sessions" help:"List live MCP sessions (GET /admin/v1/sessions)."`
	Events          eventsCmd           `cmd:"" help:"Print the journal's records, a JSON line each, as they come (GET /admin/v1/events)."`
	OAuth           oauthCmds           `cmd:"" name:"oauth" help:"OAuth sign-in of MCP clients."`
	Backup          backupCmd           `cmd:"" help:"Copy the server's state file, consistent, while it serves (GET /admin/v1/backup); the copy is read back before it replaces FILE."`

	// Hidden aliases of the old names of provider-session and mcp-sessions:
	// "session" says nothing of which session (the provider's), "sessions"
	// nothing of which sessions (MCP), so help does not offer them.
	Session  providerSessionCmds `cmd:"" hidden:"" help:"Old name of provider-session."`
	Sessions mcpSessionsCmd      `cmd:"" hidden:"" help:"Old name of mcp-sessions."`
}

type oauthCmds struct {
	Pair oauthPairCmd `cmd:"" help:"Mint a pairing code that approves one OAuth sign-in on the consent page; prints it once (POST /admin/v1/oauth/pairing-codes)."`
}

type oauthPairCmd struct {
	Access string `enum:"read-only,read-write" default:"read-only" help:"read-only or read-write: what the signed-in client may do."`
}

func (c *oauthPairCmd) Run(d *deps) error {
	return d.call(http.MethodPost, "/admin/v1/oauth/pairing-codes", map[string]any{"access": c.Access})
}

type instanceCmds struct {
	Create instanceCreateCmd `cmd:"" help:"Register a provider instance (POST /admin/v1/instances)."`
}

type threadCmds struct {
	Create  threadCreateCmd `cmd:"" help:"Create a thread (POST /admin/v1/threads)."`
	List    threadListCmd   `cmd:"" help:"List threads (GET /admin/v1/threads)."`
	Get     threadArg       `cmd:"" help:"Show a thread and its messages (GET /admin/v1/threads/{id})."`
	Switch  threadInstance  `cmd:"" help:"Switch the thread to an instance (POST …/threads/{id}/switch)."`
	Rotate  threadInstance  `cmd:"" help:"Rotate the pair's credential; prints the new authorization (POST …/threads/{id}/rotate)."`
	Detach  threadArg       `cmd:"" help:"Detach the thread's provider (POST …/threads/{id}/detach)."`
	Archive threadArg       `cmd:"" help:"Archive the thread: readable, no change, credentials revoked (POST …/threads/{id}/archive)."`
	Delete  threadArg       `cmd:"" help:"Delete the thread and revoke its credentials (DELETE …/threads/{id})."`
}

type providerSessionCmds struct {
	Open    threadInstance `cmd:"" help:"Open (or reuse) the pair's provider session; prints its authorization once (POST …/threads/{id}/provider-sessions)."`
	Release idArg          `cmd:"" help:"Release a provider session (DELETE /admin/v1/provider-sessions/{id})."`
}

type runCmds struct {
	Start runStartCmd `cmd:"" help:"Start a run of the thread by an instance; with --input the run is the agent's turn (POST …/threads/{id}/runs)."`
	End   threadArg   `cmd:"" help:"End the thread's current run (DELETE …/threads/{id}/runs/current)."`
}

type clientCmds struct {
	List    clientListCmd    `cmd:"" help:"List client grants — admin-issued, OAuth sign-ins, JWT subjects — with kind, label, access, created, last issued, expiry; no token (GET /admin/v1/clients)."`
	Show    idArg            `cmd:"" help:"Show one client grant (GET /admin/v1/clients/{id})."`
	Create  clientCreateCmd  `cmd:"" help:"Issue a client grant; prints its clientId and token (POST /admin/v1/clients)."`
	Refresh clientRefreshCmd `cmd:"" help:"Issue a new token for a client grant (POST /admin/v1/clients/{id}/refresh)."`
	Revoke  idArg            `cmd:"" help:"Revoke a client grant and all its tokens (DELETE /admin/v1/clients/{id})."`
}

type instanceCreateCmd struct {
	ID           string   `arg:"" help:"Instance id."`
	Driver       string   `default:"inproc" help:"Driver kind."`
	DriverConfig string   `placeholder:"JSON" help:"The driver's own configuration, a JSON value (sent as \"config\")."`
	Capabilities []string `placeholder:"CAP" help:"Capabilities given to every credential minted for the instance."`
}

type threadListCmd struct {
	Limit  int    `placeholder:"N" help:"Print one page of at most N threads (the API's default 100, at most 1000) and its nextCursor, rather than every thread."`
	Cursor string `placeholder:"CURSOR" help:"Print the page after this nextCursor of an earlier page."`
}

type clientListCmd struct {
	Limit  int    `placeholder:"N" help:"Print one page of at most N client grants (the API's default 100, at most 1000) and its nextCursor, rather than every grant."`
	Cursor string `placeholder:"CURSOR" help:"Print the page after this nextCursor of an earlier page."`
}

type clientRefreshCmd struct {
	ID             string `arg:"" help:"Client id."`
	RevokePrevious bool   `help:"Also revoke the grant's earlier tokens."`
}

type threadCreateCmd struct {
	ID       string `arg:"" help:"Thread id."`
	Instance string `help:"The thread's initial provider instance."`
}

type clientCreateCmd struct {
	Label  string `help:"Label of the grant, for people."`
	Access string `enum:"read-only,read-write" default:"read-only" help:"read-only or read-write."`
}

type threadArg struct {
	Thread string `arg:"" help:"Thread id."`
}

type threadInstance struct {
	Thread   string `arg:"" help:"Thread id."`
	Instance string `arg:"" help:"Provider instance id."`
}

type runStartCmd struct {
	threadInstance
	Input *string `help:"The prompt: the run is the agent's turn and ends with it (drivers that take prompts: codex, claude, opencode)." placeholder:"TEXT"`
}

func (c *runStartCmd) Run(d *deps) error {
	body := map[string]any{"instance": c.Instance}
	if c.Input != nil {
		body["input"] = *c.Input
	}
	return d.call(http.MethodPost, "/admin/v1/threads/"+url.PathEscape(c.Thread)+"/runs", body)
}

type idArg struct {
	ID string `arg:"" help:"Id."`
}

type mcpSessionsCmd struct{}

// The commands. Each Run is called by kong for the selected command.

func (c *instanceCreateCmd) Run(d *deps) error {
	body := map[string]any{"id": c.ID, "driver": c.Driver}
	if len(c.DriverConfig) > 0 {
		if !json.Valid([]byte(c.DriverConfig)) {
			return usageError{fmt.Errorf("--driver-config %q: not valid JSON", c.DriverConfig)}
		}
		body["config"] = json.RawMessage(c.DriverConfig)
	}
	if len(c.Capabilities) > 0 {
		body["capabilities"] = c.Capabilities
	}
	return d.call(http.MethodPost, "/admin/v1/instances", body)
}

func (c *threadCreateCmd) Run(d *deps) error {
	body := map[string]any{"id": c.ID}
	if c.Instance != "" {
		body["instance"] = c.Instance
	}
	return d.call(http.MethodPost, "/admin/v1/threads", body)
}

func (c *threadArg) Run(d *deps, cmd kongCommand) error {
	t := "/admin/v1/threads/" + url.PathEscape(c.Thread)
	switch cmd {
	case "admin thread get <thread>":
		return d.call(http.MethodGet, t, nil)
	case "admin thread detach <thread>":
		return d.call(http.MethodPost, t+"/detach", nil)
	case "admin thread archive <thread>":
		return d.call(http.MethodPost, t+"/archive", nil)
	case "admin thread delete <thread>":
		return d.call(http.MethodDelete, t, nil)
	case "admin run end <thread>":
		return d.call(http.MethodDelete, t+"/runs/current", nil)
	}
	return fmt.Errorf("unknown command %q", cmd)
}

func (c *threadInstance) Run(d *deps, cmd kongCommand) error {
	t := "/admin/v1/threads/" + url.PathEscape(c.Thread)
	body := map[string]any{"instance": c.Instance}
	switch cmd {
	case "admin thread switch <thread> <instance>":
		return d.call(http.MethodPost, t+"/switch", body)
	case "admin thread rotate <thread> <instance>":
		return d.call(http.MethodPost, t+"/rotate", body)
	case "admin provider-session open <thread> <instance>", "admin session open <thread> <instance>":
		return d.call(http.MethodPost, t+"/provider-sessions", body)
	}
	return fmt.Errorf("unknown command %q", cmd)
}

func (c *idArg) Run(d *deps, cmd kongCommand) error {
	id := url.PathEscape(c.ID)
	switch cmd {
	case "admin provider-session release <id>", "admin session release <id>":
		return d.call(http.MethodDelete, "/admin/v1/provider-sessions/"+id, nil)
	case "admin client revoke <id>":
		return d.call(http.MethodDelete, "/admin/v1/clients/"+id, nil)
	case "admin client show <id>":
		return d.call(http.MethodGet, "/admin/v1/clients/"+id, nil)
	}
	return fmt.Errorf("unknown command %q", cmd)
}

// Run prints one page when asked for one (--limit, --cursor); otherwise it
// follows nextCursor and prints every thread as one answer,
// {"threads":[…]}.
func (c *threadListCmd) Run(d *deps) error {
	return d.list("/admin/v1/threads", "threads", c.Limit, c.Cursor)
}

// Run lists client grants as threadListCmd lists threads: every grant as
// one answer, {"clients":[…]}, or one page.
func (c *clientListCmd) Run(d *deps) error {
	return d.list("/admin/v1/clients", "clients", c.Limit, c.Cursor)
}

// list prints the listing at path, whose answers hold their items in key:
// one page when asked for one (limit > 0 or a cursor), otherwise every
// item, following nextCursor, as one answer.
func (d *deps) list(path, key string, limit int, cursor string) error {
	if limit < 0 {
		return usageError{fmt.Errorf("--limit %d: want a positive number", limit)}
	}
	if limit > 0 || cursor != "" {
		return d.call(http.MethodGet, path+pageQuery(limit, cursor), nil)
	}
	var all []json.RawMessage
	for cursor := ""; ; {
		data, err := d.request(http.MethodGet, path+pageQuery(limit, cursor), nil)
		if err != nil {
			return err
		}
		var page map[string]json.RawMessage
		var items []json.RawMessage
		var next string
		err = json.Unmarshal(data, &page)
		if raw := page[key]; err == nil && raw != nil {
			err = json.Unmarshal(raw, &items)
		}
		if err == nil && page["nextCursor"] != nil {
			err = json.Unmarshal(page["nextCursor"], &next)
		}
		if err != nil {
			return fmt.Errorf("admin API: the %s listing is not what it should be: %w", key, err)
		}
		all = append(all, items...)
		if next == "" || next == cursor {
			break
		}
		cursor = next
	}
	data, err := json.Marshal(map[string]any{key: append([]json.RawMessage{}, all...)})
	if err != nil {
		return err
	}
	return d.cli.Admin.print(d.stdout, data)
}

// pageQuery is a listing's query string for one page of at most limit
// (0: the API's default) after cursor.
func pageQuery(limit int, cursor string) string {
	q := url.Values{}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	if len(q) == 0 {
		return ""
	}
	return "?" + q.Encode()
}

func (c *clientRefreshCmd) Run(d *deps) error {
	var body any // no body: the admin API's default, keep earlier tokens
	if c.RevokePrevious {
		body = map[string]any{"revokePrevious": true}
	}
	return d.call(http.MethodPost, "/admin/v1/clients/"+url.PathEscape(c.ID)+"/refresh", body)
}

func (c *clientCreateCmd) Run(d *deps) error {
	return d.call(http.MethodPost, "/admin/v1/clients", map[string]any{"label": c.Label, "access": c.Access})
}

func (c *mcpSessionsCmd) Run(d *deps) error {
	return d.call(http.MethodGet, "/admin/v1/sessions", nil)
}

// kongCommand is the selected command's path, such as "admin thread get
// <thread>", for commands that share an argument struct.
type kongCommand string

// apiError is a non-2xx answer of the admin API.
type apiError struct {
	Status  int
	Code    string
	Message string
	Body    string
}

func (e *apiError) Error() string {
	s := fmt.Sprintf("admin API: %d %s", e.Status, http.StatusText(e.Status))
	switch {
	case e.Code != "" && e.Message != "":
		s += ": " + e.Code + ": " + e.Message
	case e.Code != "":
		s += ": " + e.Code
	case e.Body != "":
		s += ": " + e.Body
	}
	return s
}

// call makes one admin API request and prints its answer.
func (d *deps) call(method, path string, body any) error {
	data, err := d.request(method, path, body)
	if err != nil {
		return err
	}
	return d.cli.Admin.print(d.stdout, data)
}

// request makes one admin API request and returns the body of a 2xx
// answer; any other answer is an *apiError.
func (d *deps) request(method, path string, body any) ([]byte, error) {
	a := &d.cli.Admin
	base, err := checkURL("admin-url", a.AdminURL)
	if err != nil {
		return nil, usageError{err}
	}
	token, err := a.token(d.env)
	if err != nil {
		return nil, err
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	u := strings.TrimSuffix(base.String(), "/") + path
	ctx, cancel := context.WithTimeout(d.ctx, a.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	// A client of its own: no proxy from the environment, nothing left
	// behind once the command is done.
	tr := &http.Transport{Proxy: nil}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return nil, fmt.Errorf("admin API at %s: %w", base, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("admin API: reading the answer: %w", err)
	}
	if a.Verbose {
		fmt.Fprintf(d.stderr, "%s %s → %d %s\n", method, path, resp.StatusCode, http.StatusText(resp.StatusCode))
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		e := &apiError{Status: resp.StatusCode}
		var eb struct {
			Error   string `json:"error"`
			Message string `json:"message"`
		}
		if json.Unmarshal(data, &eb) == nil && eb.Error != "" {
			e.Code, e.Message = eb.Error, eb.Message
		} else {
			e.Body = strings.TrimSpace(string(data))
			if len(e.Body) > 200 {
				e.Body = e.Body[:200] + "…"
			}
		}
		return nil, e
	}
	return data, nil
}

// print writes an answer: indented JSON, or the one field asked for.
func (a *adminCmd) print(w io.Writer, data []byte) error {
	if len(bytes.TrimSpace(data)) == 0 {
		if a.Field != "" {
			return fmt.Errorf("the answer is empty, with no field %q", a.Field)
		}
		return nil
	}
	if a.Field != "" {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(data, &obj); err != nil {
			return fmt.Errorf("the answer is not a JSON object: %w", err)
		}
		raw, ok := obj[a.Field]
		if !ok {
			return fmt.Errorf("the answer has no field %q", a.Field)
		}
		var s string
		if json.Unmarshal(raw, &s) == nil {
			_, err := fmt.Fprintln(w, s)
			return err
		}
		data = raw
	}
	data = bytes.TrimSpace(data)
	var out bytes.Buffer
	if err := json.Indent(&out, data, "", "  "); err != nil {
		// Not JSON: print it as it came.
		_, err := w.Write(data)
		return err
	}
	out.WriteByte('\n')
	_, err := w.Write(out.Bytes())
	return err
}

// token is $RUNTIME_ADMIN_TOKEN, else the content of the token file.
func (a *adminCmd) token(env map[string]string) (string, error) {
	if tok := strings.TrimSpace(env[envAdminToken]); tok != "" {
		return tok, nil
	}
	if a.AdminTokenFile == "" {
		return "", usageError{errors.New("no admin token: set $" + envAdminToken + " or --admin-token-file")}
	}
	b, err := os.ReadFile(a.AdminTokenFile)
	if err != nil {
		return "", fmt.Errorf("no admin token: $%s is not set and %w (is the server running, with the same --admin-token-file?)", envAdminToken, err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("no admin token: %s is empty", a.AdminTokenFile)
	}
	return tok, nil
}
