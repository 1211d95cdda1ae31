package agenttest

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"strings"
)

// part is a content part of any of the formats: only its text matters.
type part struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// parts decodes content that is a string or a list of parts; a string is
// one text part.
func parts(raw json.RawMessage) []part {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []part{{Type: "text", Text: s}}
	}
	var ps []part
	_ = json.Unmarshal(raw, &ps) // anything else holds no text
	return ps
}

// lastText is the last text part of content that is not an agent's own
// reminder (Claude Code adds <system-reminder> blocks to the user's
// message), trimmed; "" if there is none.
func lastText(raw json.RawMessage) string {
	ps := parts(raw)
	for i := len(ps) - 1; i >= 0; i-- {
		t := strings.TrimSpace(ps[i].Text)
		if t == "" || strings.HasPrefix(t, "<system-reminder>") {
			continue
		}
		return t
	}
	return ""
}

// joinText is every text part of content, a line each; content that is
// neither a string nor parts is returned as its JSON.
func joinText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var ps []part
	if json.Unmarshal(raw, &ps) != nil {
		return string(raw)
	}
	var texts []string
	for _, p := range ps {
		if p.Text != "" {
			texts = append(texts, p.Text)
		}
	}
	return strings.Join(texts, "\n")
}

// randomID is 12 random hex digits, for the ids of answers.
func randomID() string {
	var b [6]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}
