package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// eventsCmd is `runtime admin events`: it reads the admin API's event
// stream (the journal, SPEC §3.7) and prints each record as the stream
// carries it, a JSON object per line (with --field, that field of each).
// Without --follow or --until it prints the records the journal holds
// (after --after, default all) and exits. With --follow it prints what comes
// (after --after, default only what is still to come) until the stream
// ends or --timeout passes. With --until it follows and stops after the
// first record of that kind it printed — `--turn RUN --until turn.ended`
// waits for a turn's end, the agent's events on the way — and fails if the
// stream or --timeout ends first. A stream the server dropped because this
// reader fell behind fails, naming where to resume.
type eventsCmd struct {
	Thread   string  `placeholder:"ID" help:"Only the records of this thread."`
	Instance string  `placeholder:"ID" help:"Only the records of this instance."`
	After    *uint64 `placeholder:"N" help:"Start after record N (0: the oldest the journal keeps). Default: only records still to come."`
	Turn     string  `placeholder:"RUN" help:"Print only the records of this turn (its run id)."`
	Kind     string  `placeholder:"KINDS" help:"Only records of these kinds or families, comma-separated (credential.revoked,thread: every thread.* and the revokes)."`
	Follow   bool    `short:"F" help:"Keep printing records as they come, until the stream ends or --timeout passes."`
	Until    string  `placeholder:"KIND" help:"Follow and stop after printing a record of this kind (turn.ended, agent.tool_result, session.closed, …)."`
}

// errStreamEnded is an event stream that ended before --until's record.
var errStreamEnded = errors.New("the event stream ended")

func (c *eventsCmd) Run(d *deps) error {
	a := &d.cli.Admin
	base, err := checkURL("admin-url", a.AdminURL)
	if err != nil {
		return usageError{err}
	}
	token, err := a.token(d.env)
	if err != nil {
		return err
	}
	q := url.Values{}
	if c.Thread != "" {
		q.Set("thread", c.Thread)
	}
	if c.Instance != "" {
		q.Set("instance", c.Instance)
	}
	if c.Kind != "" {
		q.Set("kind", c.Kind)
	}
	follow := c.Follow || c.Until != ""
	switch {
	case c.After != nil:
		q.Set("after", strconv.FormatUint(*c.After, 10))
	case !follow:
		q.Set("after", "0")
	}
	if !follow {
		q.Set("follow", "false")
	}
	path := "/admin/v1/events"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	ctx, cancel := context.WithTimeout(d.ctx, a.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(base.String(), "/")+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "text/event-stream")
	tr := &http.Transport{Proxy: nil}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return fmt.Errorf("admin API at %s: %w", base, err)
	}
	defer resp.Body.Close()
	if a.Verbose {
		fmt.Fprintf(d.stderr, "GET %s → %d %s\n", path, resp.StatusCode, http.StatusText(resp.StatusCode))
	}
	if resp.StatusCode != http.StatusOK {
		e := &apiError{Status: resp.StatusCode}
		var eb struct{ Error, Message string }
		if json.NewDecoder(resp.Body).Decode(&eb) == nil {
			e.Code, e.Message = eb.Error, eb.Message
		}
		return e
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	event, last := "", ""
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "event:"); ok {
			event = strings.TrimSpace(v)
			continue
		}
		if v, ok := strings.CutPrefix(line, "id:"); ok {
			last = strings.TrimSpace(v)
			continue
		}
		data, ok := strings.CutPrefix(line, "data:")
		if !ok {
			continue
		}
		data = strings.TrimSpace(data)
		switch event {
		case "gap": // the records asked for were already past the journal's bound
			data = `{"kind":"gap","missed":` + data + `}`
		case "dropped": // this reader fell behind while following
			if err := c.print(d, `{"kind":"dropped","missed":`+data+`}`); err != nil {
				return err
			}
			return fmt.Errorf("the server dropped the event stream: this reader fell behind the journal (resume with --after %s)", cmp.Or(last, "0"))
		}
		var rec struct{ Kind, Turn string }
		if err := json.Unmarshal([]byte(data), &rec); err != nil {
			return fmt.Errorf("admin API: an event that is not a JSON object: %w", err)
		}
		if c.Turn != "" && rec.Turn != c.Turn {
			continue
		}
		if err := c.print(d, data); err != nil {
			return err
		}
		if c.Until != "" && rec.Kind == c.Until {
			return nil
		}
	}
	err = sc.Err()
	switch {
	case c.Until == "" && (err == nil || ctx.Err() != nil):
		return nil // the stream ended, or --timeout passed: done following
	case ctx.Err() != nil:
		return fmt.Errorf("no %s record within --timeout %v", c.Until, a.Timeout)
	case err != nil:
		return fmt.Errorf("admin API: reading the event stream: %w", err)
	}
	return fmt.Errorf("%w before a %s record", errStreamEnded, c.Until)
}

// print writes one record: its compact JSON, or the one field asked for.
func (c *eventsCmd) print(d *deps, data string) error {
	field := d.cli.Admin.Field
	if field == "" {
		_, err := fmt.Fprintln(d.stdout, data)
		return err
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(data), &obj); err != nil {
		return err
	}
	raw := obj[field]
	var s string
	if json.Unmarshal(raw, &s) == nil {
		_, err := fmt.Fprintln(d.stdout, s)
		return err
	}
	_, err := fmt.Fprintln(d.stdout, string(raw))
	return err
}
