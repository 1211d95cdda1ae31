package mcpruntime

// What the registries tell the endpoints (SPEC §5b.7): a list changed, a
// resource was updated. The endpoint queues each for its sessions (bounded,
// never blocking the registry) and decides who gets it.

// The list kinds of a list_changed notification.
const (
	listTools     = "tools"
	listPrompts   = "prompts"
	listResources = "resources"
)

// changeFeed is the endpoint's side of the change feed: the
// transport's (*transport.Server).ListChanged and ResourceUpdated. Neither
// blocks.
type changeFeed interface {
	ListChanged(kind string)
	ResourceUpdated(uri string)
}

// feeds returns every change feed of the runtime: its endpoints that take
// one, and the ones tests added.
func (r *Runtime) feeds() []changeFeed {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]changeFeed, 0, len(r.servers)+len(r.testFeeds))
	for _, ep := range r.servers {
		if f, ok := any(ep.srv).(changeFeed); ok {
			out = append(out, f)
		}
	}
	return append(out, r.testFeeds...)
}

// listChanged tells every endpoint that a list changed.
func (r *Runtime) listChanged(kind string) {
	for _, f := range r.feeds() {
		f.ListChanged(kind)
	}
}

// ResourceUpdated tells the sessions that subscribed uri, and may read it
// when it reaches them (CanRead), that the resource changed: a
// notifications/resources/updated each. It never blocks.
func (r *Runtime) ResourceUpdated(uri string) {
	for _, f := range r.feeds() {
		f.ResourceUpdated(uri)
	}
}
