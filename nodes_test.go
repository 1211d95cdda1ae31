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
// its error; with OAuth sign-in it refuses the configuration before
// joining (OAuth keeps its state on one node).
func TestNewJoinsConfigCluster(t *testing.T) {
	tests := []struct {
		name      string
		oauth     string
		want      error
		wantJoins int
	}{
		{"join fails", "", errJoinRefused, 1},
		{"oauth refused", "http://127.0.0.1:7331", mcpruntime.ErrInvalidArgument, 0},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			c := &refusingCluster{}
			rt, err := mcpruntime.New(mcpruntime.Config{Cluster: c, OAuth: mcpruntime.OAuthConfig{PublicOrigin: test.oauth}})
			if err == nil {
				rt.Close()
			}
			if !errors.Is(err, test.want) || c.joins != test.wantJoins {
				t.Errorf("New = %v after %d joins, want %v after %d", err, c.joins, test.want, test.wantJoins)
			}
		})
	}
}
