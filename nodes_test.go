package mcpruntime_test

import (
	"errors"
	"testing"

	mcpruntime "github.com/agenthost/mcpruntime"
	"github.com/agenthost/mcpruntime/internal/membership"
)

// refusingCluster is a Cluster whose Join fails, counting its calls.
type refusingCluster struct{ joins int }

var errJoinRefused = errors.New("join refused")

func (c *refusingCluster) Join(membership.Options) (membership.Node, error) {
	c.joins++
	return nil, errJoinRefused
}

// TestNewJoinsConfigCluster: New joins Config.Cluster once and returns
// its error; an OAuth configuration several nodes cannot serve is refused
// before joining: no secret (each node would generate its own, and a
// client id or consent form of one would not verify on another), or the
// resource-server mode (SPEC §5d.9, §5d.10).
func TestNewJoinsConfigCluster(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	tests := []struct {
		name      string
		oauth     mcpruntime.OAuthConfig
		want      error
		wantJoins int
	}{
		{"join fails", mcpruntime.OAuthConfig{}, errJoinRefused, 1},
		{"oauth with a secret joins", mcpruntime.OAuthConfig{PublicOrigin: "http://127.0.0.1:7331", Secret: secret}, errJoinRefused, 1},
		{"oauth without a secret refused", mcpruntime.OAuthConfig{PublicOrigin: "http://127.0.0.1:7331"}, mcpruntime.ErrInvalidArgument, 0},
		{"resource-server mode refused", mcpruntime.OAuthConfig{PublicOrigin: "http://127.0.0.1:7331", Secret: secret, Issuer: "https://idp.example"},
			mcpruntime.ErrInvalidArgument, 0},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			c := &refusingCluster{}
			rt, err := mcpruntime.New(mcpruntime.Config{Cluster: c, OAuth: test.oauth})
			if err == nil {
				rt.Close()
			}
			if !errors.Is(err, test.want) || c.joins != test.wantJoins {
				t.Errorf("New = %v after %d joins, want %v after %d", err, c.joins, test.want, test.wantJoins)
			}
		})
	}
}
