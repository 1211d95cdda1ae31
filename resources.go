package mcpruntime

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/yosida95/uritemplate/v3"
)

// ErrInvalidResource is returned by RegisterResource and
// RegisterResourceTemplate for a resource or template that cannot be
// registered: no URI or name, a template that is not RFC 6570, an access
// class other than read or readAsCaller, no handler, or a URI or template in
// use.
var ErrInvalidResource = errors.New("invalid resource")

// Resource is a resource at one URI: the go-sdk's description of it (uri,
// name, title, description, mimeType, size, annotations, icons) with the
// runtime's access rules and its handler.
type Resource struct {
	mcp.Resource
	// Access is AccessRead or AccessReadAsCaller. A caller it refuses is
	// answered as if the resource did not exist, and does not see it in
	// resources/list.
	Access Access
	// Capability, if set, must be among the caller's capabilities (refused
	// like the class).
	Capability string
	Handler    ResourceHandler
}

// ResourceTemplate is a family of resources whose URIs match an RFC 6570
// template (uriTemplate), read by one handler with the template's
// variables.
type ResourceTemplate struct {
	mcp.ResourceTemplate
	Access     Access // as Resource's
	Capability string
	Handler    ResourceHandler
	// Complete, if set, completes the template's variables
	// (completion/complete with a ref/resource naming the template).
	Complete CompletionHandler
}

// ResourceHandler reads a resource the caller may read. It runs on the
// request's goroutine and should return when ctx is done. ErrResourceNotFound
// says there is none at that URI; another error is answered as an internal
// error (logged, not shown). A result with InputRequests asks the client
// first (see Exchange).
type ResourceHandler func(ctx context.Context, read *ResourceRead) (*mcp.ReadResourceResult, error)

// ResourceRead is what a resource handler is given.
type ResourceRead struct {
	Caller Principal
	URI    string
	// Vars are the template's variables as the URI gave them; nil for a
	// resource registered at its URI.
	Vars map[string]string
	Exchange
	rt *Runtime
}

// Runtime returns the runtime serving the read.
func (r *ResourceRead) Runtime() *Runtime { return r.rt }

type registeredResource struct {
	Resource
	listed *mcp.Resource // read-only
}

type registeredTemplate struct {
	ResourceTemplate
	listed *mcp.ResourceTemplate // read-only
	tmpl   *uritemplate.Template
	// exists, if set, says whether the template has a resource at vars
	// now (built-ins: a cheap store read), so that an absent one is
	// neither readable nor subscribable.
	exists func(vars map[string]string) bool
}

// admits reports whether caller passes an access class of a resource or a
// prompt and its capability.
func admits(a Access, capability string, caller Principal) bool {
	if capability != "" && !slices.Contains(caller.Capabilities, capability) {
		return false
	}
	return a == AccessRead || (a == AccessReadAsCaller && caller.Provider())
}

func validReadAccess(a Access) bool { return a == AccessRead || a == AccessReadAsCaller }

// RegisterResource adds a resource at its URI and tells the endpoints'
// sessions that the resource list changed.
func (r *Runtime) RegisterResource(res Resource) error {
	if res.URI == "" || res.Name == "" || !validReadAccess(res.Access) || res.Handler == nil {
		return fmt.Errorf("resource %q: needs a uri, a name, access read or readAsCaller and a handler: %w", res.URI, ErrInvalidResource)
	}
	listed := res.Resource
	listed.Icons = slices.Clone(res.Icons)
	if !r.resources.add(res.URI, &registeredResource{Resource: res, listed: &listed}) {
		return fmt.Errorf("resource %q: uri in use: %w", res.URI, ErrInvalidResource)
	}
	r.listChanged(listResources)
	return nil
}

// RegisterResourceTemplate adds a resource template and tells the
// endpoints' sessions that the resource list changed.
func (r *Runtime) RegisterResourceTemplate(t ResourceTemplate) error {
	return r.registerTemplate(t, nil)
}

func (r *Runtime) registerTemplate(t ResourceTemplate, exists func(map[string]string) bool) error {
	if t.URITemplate == "" || t.Name == "" || !validReadAccess(t.Access) || t.Handler == nil {
		return fmt.Errorf("resource template %q: needs a uriTemplate, a name, access read or readAsCaller and a handler: %w", t.URITemplate, ErrInvalidResource)
	}
	tmpl, err := uritemplate.New(t.URITemplate)
	if err != nil {
		return fmt.Errorf("resource template %q: %v: %w", t.URITemplate, err, ErrInvalidResource)
	}
	listed := t.ResourceTemplate
	listed.Icons = slices.Clone(t.Icons)
	if !r.templates.add(t.URITemplate, &registeredTemplate{ResourceTemplate: t, listed: &listed, tmpl: tmpl, exists: exists}) {
		return fmt.Errorf("resource template %q: in use: %w", t.URITemplate, ErrInvalidResource)
	}
	r.listChanged(listResources)
	return nil
}

// RemoveResource removes the resource registered at uri, or else the
// template registered as uri, and tells the endpoints' sessions that the
// resource list changed. It reports whether there was one.
func (r *Runtime) RemoveResource(uri string) bool {
	if !r.resources.remove(uri) && !r.templates.remove(uri) {
		return false
	}
	r.listChanged(listResources)
	return true
}

// resolvedResource is what a URI names for one caller: its handler and,
// for a template, the variables.
type resolvedResource struct {
	handler ResourceHandler
	vars    map[string]string
}

// resolve finds what caller may read at uri: a resource registered at it,
// else the first template (by template text) that matches it and admits
// the caller. Refused and unknown are alike: false.
func (r *Runtime) resolve(caller Principal, uri string) (resolvedResource, bool) {
	if res, ok := r.resources.get(uri); ok {
		if admits(res.Access, res.Capability, caller) {
			return resolvedResource{handler: res.Handler}, true
		}
		return resolvedResource{}, false
	}
	items, keys := r.templates.snapshot()
	for _, k := range keys {
		t := items[k]
		if !admits(t.Access, t.Capability, caller) {
			continue
		}
		vals := t.tmpl.Match(uri)
		if vals == nil {
			continue
		}
		vars := make(map[string]string, len(t.tmpl.Varnames()))
		for _, name := range t.tmpl.Varnames() {
			vars[name] = vals.Get(name).String()
		}
		if t.exists != nil && !t.exists(vars) {
			continue
		}
		return resolvedResource{handler: t.Handler, vars: vars}, true
	}
	return resolvedResource{}, false
}

// CanRead reports whether p may read the resource at uri now: a resource
// or a template matches it, its access class and capability admit p, and
// (for the built-in transcripts) the resource exists. The MCP endpoint asks
// before it accepts resources/subscribe and again before each
// notifications/resources/updated it delivers.
func (r *Runtime) CanRead(p Principal, uri string) bool {
	_, ok := r.resolve(p, uri)
	return ok
}

// ReadResource reads the resource at uri for caller, as resources/read
// does, for an embedder: ErrResourceNotFound when nothing caller may read
// is there. A handler that needs the client answers a result with
// InputRequests, returned as it is.
func (r *Runtime) ReadResource(ctx context.Context, caller Principal, uri string) (*mcp.ReadResourceResult, error) {
	return r.readResource(ctx, &ResourceRead{Caller: caller, URI: uri})
}

func (r *Runtime) readResource(ctx context.Context, read *ResourceRead) (*mcp.ReadResourceResult, error) {
	res, ok := r.resolve(read.Caller, read.URI)
	if !ok {
		return nil, fmt.Errorf("resource %q: %w", read.URI, ErrResourceNotFound)
	}
	read.Vars, read.rt = res.vars, r
	out, err := res.handler(ctx, read)
	if err != nil {
		return nil, fmt.Errorf("resource %q: %w", read.URI, err)
	}
	if out == nil {
		out = &mcp.ReadResourceResult{}
	}
	if len(out.InputRequests) == 0 && out.Contents == nil {
		out.Contents = []*mcp.ResourceContents{}
	}
	if out.CacheScope == "" {
		// As the lists say: what a read answers may depend on who asks.
		// A handler that knows better sets "public" itself.
		out.CacheScope = privateScope.CacheScope
	}
	return out, nil
}
