package mcpclient

import (
	"errors"
	"io"
	"strings"
	"testing"
)

func TestReadSSEReply(t *testing.T) {
	tests := []struct {
		name   string
		stream string
		want   string
	}{
		{
			name:   "single event",
			stream: "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{\"ok\":true}}\n\n",
			want:   `{"ok":true}`,
		},
		{
			name: "skips comments, notifications and other ids",
			stream: ": keepalive\n\n" +
				"data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{}}\n\n" +
				"id: 3\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":8,\"result\":{}}\n\n" +
				"data: {\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{\"n\":1}}\n\n",
			want: `{"n":1}`,
		},
		{
			name:   "CRLF line endings and no space after the colon",
			stream: "event:message\r\ndata:{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":[]}\r\n\r\n",
			want:   `[]`,
		},
		{
			name:   "data split over several lines",
			stream: "data: {\"jsonrpc\":\"2.0\",\ndata: \"id\":7,\ndata: \"result\":\"x\"}\n\n",
			want:   `"x"`,
		},
		{
			name:   "a line longer than the read buffer",
			stream: "data: {\"jsonrpc\":\"2.0\",\"id\":7,\"result\":\"" + strings.Repeat("a", 10000) + "\"}\n\n",
			want:   `"` + strings.Repeat("a", 10000) + `"`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ReadSSEReply(strings.NewReader(tt.stream), 7)
			if err != nil {
				t.Fatalf("ReadSSEReply: %v", err)
			}
			if string(got) != tt.want {
				t.Errorf("result = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestReadSSEReplyRPCError(t *testing.T) {
	stream := "data: {\"jsonrpc\":\"2.0\",\"id\":7,\"error\":{\"code\":-32602,\"message\":\"bad\"}}\n\n"
	_, err := ReadSSEReply(strings.NewReader(stream), 7)
	var rpc *RPCError
	if !errors.As(err, &rpc) || rpc.Code != -32602 || rpc.Message != "bad" {
		t.Fatalf("err = %v, want RPCError -32602 bad", err)
	}
}

func TestReadSSEReplyEndsWithoutResponse(t *testing.T) {
	for name, stream := range map[string]string{
		"empty":                    "",
		"only another id":          "data: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n",
		"event cut before a blank": "data: {\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{}}\n",
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ReadSSEReply(strings.NewReader(stream), 7)
			if !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("err = %v, want io.ErrUnexpectedEOF", err)
			}
		})
	}
}

func TestReadSSEReplyMalformedData(t *testing.T) {
	if _, err := ReadSSEReply(strings.NewReader("data: {not json\n\n"), 7); err == nil {
		t.Fatal("malformed data: no error")
	}
}

func TestAnswersComparesIDs(t *testing.T) {
	tests := []struct {
		msg  message
		id   int64
		want bool
	}{
		{message{ID: []byte("7"), Result: []byte("{}")}, 7, true},
		{message{ID: []byte(" 7 "), Result: []byte("{}")}, 7, true},
		{message{ID: []byte("17"), Result: []byte("{}")}, 7, false},
		{message{ID: []byte(`"7"`), Result: []byte("{}")}, 7, false},
		{message{ID: []byte("7"), Error: &RPCError{}}, 7, true},
		{message{ID: []byte("7")}, 7, false}, // a request from the server, not a response
	}
	for _, tt := range tests {
		if got := tt.msg.answers(tt.id); got != tt.want {
			t.Errorf("answers(%s, %d) = %v, want %v", tt.msg.ID, tt.id, got, tt.want)
		}
	}
}
