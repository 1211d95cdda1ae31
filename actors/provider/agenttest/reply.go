package agenttest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// reply writes one answer in a format: as server-sent events when stream
// is set, else as one JSON body.
type reply struct {
	w      http.ResponseWriter
	stream bool
	model  string      // echoed back; a default when the request named none
	hold   func() bool // waits out the answer's sleep; false: give up, write nothing more
	seq    int         // the Responses stream's sequence_number
}

// start sends the stream's headers, so that the client sees the answer
// begin before a held one is released.
func (r *reply) start() {
	h := r.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	r.w.WriteHeader(http.StatusOK)
	r.flush()
}

// event writes one server-sent event; an empty name writes the data line
// alone (Chat Completions' chunks).
func (r *reply) event(name string, data any) {
	raw, err := json.Marshal(data)
	if err != nil {
		panic(fmt.Sprintf("agenttest: marshal %s event: %v", name, err)) // every event is built here from plain values
	}
	if name != "" {
		fmt.Fprintf(r.w, "event: %s\n", name)
	}
	fmt.Fprintf(r.w, "data: %s\n\n", raw)
	r.flush()
}

func (r *reply) flush() {
	if f, ok := r.w.(http.Flusher); ok {
		f.Flush()
	}
}

// json writes a whole non-streamed answer.
func (r *reply) json(v any) {
	r.w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(r.w).Encode(v); err != nil {
		return // the client went away
	}
}

// modelName is what the answer says the model was.
func (r *reply) modelName() string {
	if r.model != "" {
		return r.model
	}
	return "scripted-model"
}

// obj is a JSON object under construction.
type obj = map[string]any

// now is the Unix time answers carry.
func now() int64 { return time.Now().Unix() }
