package cluster_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	mcpruntime "github.com/agenthost/mcpruntime"
	"github.com/agenthost/mcpruntime/cluster"
	"github.com/agenthost/mcpruntime/internal/tlstest"
)

// TestInternalTLSValidate: InternalTLS wants an https:// URL, a CA, and a
// certificate of that CA for both server and client authentication that
// names the URL's host; each wrong setting is refused at Validate, naming
// it.
func TestInternalTLSValidate(t *testing.T) {
	ca, rogue := tlstest.NewCA(t, "cluster CA"), tlstest.NewCA(t, "rogue CA")
	good, _, _ := ca.Issue(t, "n1", tlstest.Node, "127.0.0.1", "n1.internal")
	serverOnly, _, _ := ca.Issue(t, "n1", tlstest.Usage{x509.ExtKeyUsageServerAuth}, "127.0.0.1")
	foreign, _, _ := rogue.Issue(t, "n1", tlstest.Node, "127.0.0.1")
	tests := []struct {
		name   string
		change func(*cluster.Config)
		want   string // in the error; "" for none
	}{
		{"valid", func(*cluster.Config) {}, ""},
		{"a DNS name", func(c *cluster.Config) { c.URL = "https://n1.internal:7441" }, ""},
		{"http URL", func(c *cluster.Config) { c.URL = "http://127.0.0.1:7441" }, "want https://"},
		{"no CA", func(c *cluster.Config) { c.InternalTLS.CA = nil }, "no CA"},
		{"no certificate", func(c *cluster.Config) { c.InternalTLS.Certificate = tls.Certificate{} }, "no certificate"},
		{"another CA's certificate", func(c *cluster.Config) { c.InternalTLS.Certificate = foreign }, "not one of the CA's"},
		{"server auth only", func(c *cluster.Config) { c.InternalTLS.Certificate = serverOnly }, "not one of the CA's"},
		{"host not named", func(c *cluster.Config) { c.URL = "https://10.0.0.5:7441" }, "does not name the URL's host 10.0.0.5:7441"},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			c := valid()
			c.URL = "https://127.0.0.1:7441"
			c.InternalTLS = &cluster.InternalTLS{Certificate: good, CA: ca.Pool}
			test.change(&c)
			err := c.Validate()
			switch {
			case test.want == "" && err != nil:
				t.Errorf("Validate() = %v, want nil", err)
			case test.want != "" && (!errors.Is(err, mcpruntime.ErrInvalidArgument) || !strings.Contains(err.Error(), test.want)):
				t.Errorf("Validate() = %v, want ErrInvalidArgument saying %q", err, test.want)
			}
		})
	}
}

// TestInternalTLSHandshake: a listener with InternalServerTLS admits a
// client with InternalClientTLS and refuses, in the handshake, a client
// without a certificate and one whose certificate is another CA's; a node
// client refuses a listener whose certificate is another CA's.
func TestInternalTLSHandshake(t *testing.T) {
	ca, rogue := tlstest.NewCA(t, "cluster CA"), tlstest.NewCA(t, "rogue CA")
	cfg := func(ca *tlstest.CA, name string) cluster.Config {
		cert, _, _ := ca.Issue(t, name, tlstest.Node, "127.0.0.1")
		c := valid()
		c.URL = "https://127.0.0.1:7441"
		c.InternalTLS = &cluster.InternalTLS{Certificate: cert, CA: ca.Pool}
		return c
	}
	n1, n2, impostor := cfg(ca, "n1"), cfg(ca, "n2"), cfg(rogue, "n3")
	get := func(url string, tc *tls.Config) (int, error) {
		tr := &http.Transport{TLSClientConfig: tc}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr}).Get(url)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	listener := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	}))
	listener.TLS = n1.InternalServerTLS()
	listener.StartTLS()
	defer listener.Close()
	if code, err := get(listener.URL, n2.InternalClientTLS()); err != nil || code != http.StatusNoContent {
		t.Fatalf("n2 to n1's listener: %d, %v; want 204", code, err)
	}
	noCert := n2.InternalClientTLS()
	noCert.Certificates = nil
	if code, err := get(listener.URL, noCert); err == nil {
		t.Errorf("a client without a certificate to n1's listener: %d, want refused in the handshake", code)
	}
	if code, err := get(listener.URL, impostor.InternalClientTLS()); err == nil {
		t.Errorf("a client with another CA's certificate to n1's listener: %d, want refused in the handshake", code)
	}
	// An impostor that asks for no client certificate: only n2's own check
	// of the listener's certificate can refuse it.
	open := impostor.InternalServerTLS()
	open.ClientAuth = tls.NoClientCert
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	}))
	srv.TLS = open
	srv.StartTLS()
	defer srv.Close()
	if code, err := get(srv.URL, n2.InternalClientTLS()); err == nil {
		t.Errorf("n2 to a listener with another CA's certificate: %d, want refused in the handshake", code)
	}
	if n := (cluster.Config{}); n.InternalServerTLS() != nil || n.InternalClientTLS() != nil {
		t.Error("TLS configurations without InternalTLS, want nil (plain HTTP)")
	}
}
