package httpguard

import (
	"errors"
	"net/http/httptest"
	"testing"
)

func TestCheck(t *testing.T) {
	g := &Guard{AllowedHosts: []string{"runtime.internal"}, AllowedOrigins: []string{"https://app.example"}}
	tests := []struct {
		name   string
		host   string
		origin string
		want   error
	}{
		{name: "127.0.0.1 with port", host: "127.0.0.1:7332"},
		{name: "127.0.0.2", host: "127.0.0.2"},
		{name: "localhost", host: "localhost:7332"},
		{name: "LOCALHOST", host: "LOCALHOST"},
		{name: "[::1]", host: "[::1]:7332"},
		{name: "listed host", host: "runtime.internal:7332"},
		{name: "rebound name", host: "evil.example:7332", want: ErrHost},
		{name: "empty host", host: "", want: ErrHost},
		{name: "localhost suffix", host: "localhost.evil.example", want: ErrHost},
		{name: "loopback origin", host: "127.0.0.1", origin: "http://localhost:3000"},
		{name: "loopback https origin", host: "127.0.0.1", origin: "https://127.0.0.1"},
		{name: "listed origin", host: "127.0.0.1", origin: "https://app.example"},
		{name: "foreign origin", host: "127.0.0.1", origin: "http://evil.example", want: ErrOrigin},
		{name: "null origin", host: "127.0.0.1", origin: "null", want: ErrOrigin},
		{name: "origin with a path", host: "127.0.0.1", origin: "http://localhost/x", want: ErrOrigin},
		{name: "file origin", host: "127.0.0.1", origin: "file://localhost", want: ErrOrigin},
		{name: "foreign origin checked before host", host: "evil.example", origin: "http://evil.example", want: ErrOrigin},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/metrics", nil)
			r.Host = test.host
			if test.origin != "" {
				r.Header.Set("Origin", test.origin)
			}
			if got := g.Check(r); !errors.Is(got, test.want) || (got == nil) != (test.want == nil) {
				t.Errorf("Check(Host %q, Origin %q) = %v, want %v", test.host, test.origin, got, test.want)
			}
		})
	}
}

func TestSwitches(t *testing.T) {
	r := httptest.NewRequest("GET", "/", nil)
	r.Host = "evil.example"
	r.Header.Set("Origin", "http://evil.example")
	if err := (&Guard{}).Check(r); !errors.Is(err, ErrOrigin) {
		t.Errorf("zero Guard: %v, want ErrOrigin", err)
	}
	if err := (&Guard{AllowAnyOrigin: true}).Check(r); !errors.Is(err, ErrHost) {
		t.Errorf("AllowAnyOrigin: %v, want ErrHost", err)
	}
	if err := (&Guard{AllowAnyOrigin: true, DisableHostCheck: true}).Check(r); err != nil {
		t.Errorf("both off: %v, want nil", err)
	}
}
