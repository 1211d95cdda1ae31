package mcpruntime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/yosida95/uritemplate/v3"
)

// The built-in resources of SPEC §5b.5: each thread's transcript.

// TranscriptTemplate is the URI template of the thread transcripts, a
// built-in resource template of class read.
const TranscriptTemplate = "mcpruntime://threads/{threadId}/transcript"

var transcriptTemplate = uritemplate.MustNew(TranscriptTemplate)

// TranscriptURI is the URI of a thread's transcript resource: the template
// expanded (characters outside RFC 3986's unreserved set percent-encoded).
func TranscriptURI(threadID string) string {
	uri, _ := transcriptTemplate.Expand(uritemplate.Values{"threadId": uritemplate.String(threadID)})
	return uri
}

// Builtins are the names of the runtime's built-in tools (SPEC §4) and
// resource templates (§5b), each of which Config.OmitBuiltins may leave
// out.
var Builtins = []string{"runtime_capabilities", "thread_list", "thread_read", "thread_post", TranscriptName}

// TranscriptName is the name of the transcript resource template.
const TranscriptName = "thread-transcript"

// checkOmitBuiltins returns the set Config.OmitBuiltins names.
func checkOmitBuiltins(names []string) (map[string]bool, error) {
	omit := map[string]bool{}
	for _, n := range names {
		switch {
		case n == "*":
			for _, b := range Builtins {
				omit[b] = true
			}
		case slices.Contains(Builtins, n):
			omit[n] = true
		default:
			return nil, fmt.Errorf("Config.OmitBuiltins: %q is not a built-in (%s, or *): %w", n, strings.Join(Builtins, ", "), ErrInvalidArgument)
		}
	}
	return omit, nil
}

func (r *Runtime) registerBuiltinResources() error {
	return r.registerTemplate(ResourceTemplate{
		ResourceTemplate: mcp.ResourceTemplate{
			URITemplate: TranscriptTemplate,
			Name:        TranscriptName,
			Title:       "Thread transcript",
			Description: "A thread's status, current provider instance and message log, as JSON. Updated (notifications/resources/updated) when a message is posted.",
			MIMEType:    "application/json",
		},
		Access:  AccessRead,
		Handler: r.readTranscript,
	}, func(vars map[string]string) bool {
		_, err := r.store.Read().Thread(vars["threadId"])
		return err == nil
	})
}

// transcript is the JSON of a transcript resource.
type transcript struct {
	ThreadID string    `json:"threadId"`
	Status   string    `json:"status"`
	Instance string    `json:"instance,omitempty"`
	Run      *Run      `json:"activeRun,omitempty"`
	Messages []Message `json:"messages"`
}

func (r *Runtime) readTranscript(ctx context.Context, read *ResourceRead) (*mcp.ReadResourceResult, error) {
	t, err := r.Thread(ctx, read.Vars["threadId"])
	if errors.Is(err, ErrUnknownThread) || errors.Is(err, ErrInvalidID) {
		return nil, ErrResourceNotFound
	}
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(transcript{ThreadID: t.ID, Status: t.Status, Instance: t.Instance, Run: t.Run, Messages: t.Messages})
	if err != nil {
		return nil, fmt.Errorf("encode transcript: %w", err)
	}
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: read.URI, MIMEType: "application/json", Text: string(b)}}}, nil
}
