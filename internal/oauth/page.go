package oauth

import (
	"bytes"
	"html/template"
	"net/http"
	"net/url"
)

// The consent page and the error page: one template, no script, no
// external resource (the Content-Security-Policy says so), every value
// escaped by html/template.
var pages = template.Must(template.New("page").Parse(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="same-origin">
<title>{{if .Error}}Sign-in refused{{else}}Approve {{.Client}}{{end}} — {{.Server}}</title>
<style>
body{font:16px/1.5 system-ui,sans-serif;background:#f4f5f7;color:#1d2330;margin:0}
main{max-width:30rem;margin:3rem auto;background:#fff;border-radius:12px;padding:2rem;box-shadow:0 2px 12px rgba(0,0,0,.08)}
h1{font-size:1.3rem;margin:0 0 1rem}
dl{display:grid;grid-template-columns:max-content 1fr;gap:.3rem 1rem;margin:0 0 1.5rem}
dt{color:#5b6475}dd{margin:0;overflow-wrap:anywhere}
label{display:block;font-weight:600;margin-bottom:.4rem}
input[type=text]{font:1.4rem ui-monospace,monospace;letter-spacing:.1em;width:100%;box-sizing:border-box;padding:.5rem;border:1px solid #b8bfcc;border-radius:8px;text-transform:uppercase}
.buttons{display:flex;gap:.75rem;margin-top:1.25rem}
button{font:inherit;padding:.6rem 1.2rem;border-radius:8px;border:1px solid #b8bfcc;background:#fff;cursor:pointer}
button.primary{background:#2456d3;border-color:#2456d3;color:#fff}
.note{color:#5b6475;font-size:.9rem}
.problem{background:#fdecec;color:#8a1c1c;border-radius:8px;padding:.6rem .8rem;margin-bottom:1rem}
</style>
</head>
<body>
<main>
{{if .Error}}
<h1>Sign-in refused</h1>
<p class="problem" id="problem">{{.Error}}</p>
{{if .ErrorCode}}<p>Error code: <code id="error-code">{{.ErrorCode}}</code></p>{{end}}
<p class="note">Nothing was sent back to the client{{if .ErrorCode}}; return to it and start the sign-in again{{end}}.</p>
{{else}}
<h1><span id="client-name">{{.Client}}</span> asks to use {{.Server}}</h1>
{{if .Problem}}<p class="problem" id="problem">{{.Problem}}</p>{{end}}
<dl>
<dt>Client</dt><dd>{{.Client}}</dd>
<dt>Returns to</dt><dd id="redirect-host">{{.RedirectHost}}</dd>
<dt>Access</dt><dd>the MCP endpoint {{.Resource}} (scope <code>{{.Scope}}</code>), read-only or read-write as the pairing code says</dd>
</dl>
<form method="post" action="{{.Action}}">
<input type="hidden" name="request" value="{{.Request}}">
<input type="hidden" name="csrf" value="{{.CSRF}}">
<label for="pairing_code">Pairing code</label>
<input type="text" id="pairing_code" name="pairing_code" autocomplete="one-time-code" autocapitalize="characters" spellcheck="false" maxlength="32" required placeholder="XXXXX-XXXXX" autofocus>
<p class="note">Get a pairing code from the host that runs {{.Server}} (<code>runtime admin oauth pair</code>). It works once, for a few minutes.</p>
<div class="buttons">
<button class="primary" type="submit" name="action" value="approve" id="approve">Approve</button>
<button type="submit" name="action" value="deny" formnovalidate id="deny">Deny</button>
</div>
</form>
{{end}}
</main>
</body>
</html>
`))

type pageData struct {
	Server, Client, RedirectHost, Resource, Scope string
	Action, Request, CSRF                         string
	Problem, Error, ErrorCode                     string
}

// render writes a page. formTarget is the origin the consent form's answer
// redirects to ("" for a page without a form): CSP form-action applies to
// the redirect after the POST too.
func (s *Server) render(w http.ResponseWriter, status int, d pageData, formTarget string) {
	var buf bytes.Buffer
	if err := pages.Execute(&buf, d); err != nil {
		s.cfg.Logger.Error("oauth: render page", "err", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	formAction := "'none'"
	if formTarget != "" {
		formAction = "'self' " + formTarget
	}
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action "+formAction+"; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin") // not no-referrer: Chrome then sends "Origin: null" with the form
	w.WriteHeader(status)
	w.Write(buf.Bytes())
}

// consentPage shows the consent form of request id, with a problem line
// when a submission was refused.
func (s *Server) consentPage(w http.ResponseWriter, status int, id string, req *authRequest, problem string) {
	host, target := req.redirect, ""
	if u, err := url.Parse(req.redirect); err == nil {
		host, target = u.Host, u.Scheme+"://"+u.Host
	}
	s.render(w, status, pageData{
		Server: s.cfg.ServerName, Client: req.client.Name, RedirectHost: host, Resource: req.resource, Scope: Scope,
		Action: s.cfg.Issuer + PathAuthorize, Request: id, CSRF: s.mac("csrf", id), Problem: problem,
	}, target)
}

// errorPage refuses an authorization without sending the user agent
// anywhere; reason goes to the audit trail.
func (s *Server) errorPage(w http.ResponseWriter, status int, message, reason string, c *Client) {
	s.refusalPage(w, status, "", message, reason, c)
}

// refusalPage is errorPage showing the OAuth error code (RFC 6749
// §4.1.2.1) of a refusal that is not sent back to an unconfirmed redirect
// URI (SPEC §5c.6).
func (s *Server) refusalPage(w http.ResponseWriter, status int, code, message, reason string, c *Client) {
	s.refused(kindAuthFailed, reason, c)
	s.render(w, status, pageData{Server: s.cfg.ServerName, Error: message, ErrorCode: code}, "")
}
