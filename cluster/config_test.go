package cluster_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	mcpruntime "github.com/agenthost/mcpruntime"
	"github.com/agenthost/mcpruntime/cluster"
	"github.com/agenthost/mcpruntime/internal/membership"
)

var _ mcpruntime.Cluster = cluster.Config{}

func valid() cluster.Config {
	return cluster.Config{
		Etcd: []string{"127.0.0.1:1"}, Node: "n1", URL: "http://10.0.0.5:7441",
		Secret: strings.Repeat("s", cluster.MinSecret),
	}
}

// TestValidate: each required setting, and each malformed one, is
// refused with ErrInvalidArgument, naming the setting.
func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		change func(*cluster.Config)
		want   string // in the error; "" for none
	}{
		{"valid", func(*cluster.Config) {}, ""},
		{"trailing slash", func(c *cluster.Config) { c.URL += "/" }, ""},
		{"longest node id", func(c *cluster.Config) { c.Node = strings.Repeat("a", 64) }, ""},
		{"fence", func(c *cluster.Config) { c.Fence = 999 * time.Millisecond }, ""},
		{"no etcd", func(c *cluster.Config) { c.Etcd = nil }, "etcd"},
		{"no node", func(c *cluster.Config) { c.Node = "" }, "node id"},
		{"node too long", func(c *cluster.Config) { c.Node = strings.Repeat("a", 65) }, "node id"},
		{"node with a colon", func(c *cluster.Config) { c.Node = "n:1" }, "node id"},
		{"node with an at", func(c *cluster.Config) { c.Node = "n@1" }, "node id"},
		{"node of dots", func(c *cluster.Config) { c.Node = ".." }, "node id"},
		{"no URL", func(c *cluster.Config) { c.URL = "" }, "URL"},
		{"URL with a path", func(c *cluster.Config) { c.URL += "/internal" }, "URL"},
		{"URL with a query", func(c *cluster.Config) { c.URL += "?a=1" }, "URL"},
		{"URL not http", func(c *cluster.Config) { c.URL = "ftp://10.0.0.5:7441" }, "URL"},
		{"short secret", func(c *cluster.Config) { c.Secret = c.Secret[1:] }, "secret"},
		{"fence of a second", func(c *cluster.Config) { c.Fence = time.Second }, "fence"},
		{"negative fence", func(c *cluster.Config) { c.Fence = -1 }, "fence"},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			c := valid()
			test.change(&c)
			err := c.Validate()
			switch {
			case test.want == "" && err != nil:
				t.Errorf("Validate() = %v, want nil", err)
			case test.want != "" && (!errors.Is(err, mcpruntime.ErrInvalidArgument) || !strings.Contains(err.Error(), test.want)):
				t.Errorf("Validate() = %v, want ErrInvalidArgument naming %q", err, test.want)
			}
		})
	}
}

// TestJoinValidatesFirst: Join refuses an invalid configuration before
// it dials etcd, and its error leaves the secret out.
func TestJoinValidatesFirst(t *testing.T) {
	c := valid()
	c.Node = ""
	n, err := c.Join(membership.Options{})
	if n != nil || !errors.Is(err, mcpruntime.ErrInvalidArgument) {
		t.Fatalf("Join = %v, %v; want ErrInvalidArgument", n, err)
	}
	if strings.Contains(err.Error(), c.Secret) {
		t.Errorf("Join's error %q shows the secret", err)
	}
}
