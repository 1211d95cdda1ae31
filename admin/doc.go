// Package admin is the runtime's admin API: JSON over HTTP, for a host that
// drives the runtime as a sidecar from any language.
//
// # Authentication
//
// Every request to a route below must carry
// "Authorization: Bearer <admin token>" (Options.Token). The presented
// token is hashed with SHA-256 and compared with the digest of the admin
// token in constant time. A missing header gets 401 with
// `WWW-Authenticate: Bearer realm="admin"`; a wrong token gets 401 with
// `error="invalid_token"` added; both carry the same JSON body. With an
// empty Options.Token every request is refused.
//
// The path is routed first, as it was sent: nothing is cleaned or
// redirected. A path that names no route — unknown, or with an empty or
// dot segment ("//", "/./", "/../", "%2e%2e") — is 404 not_found, a wrong
// method 405 and OPTIONS 204, with or without a token: they tell only what
// this table tells.
//
// # Routes
//
// Request bodies are JSON (Content-Type application/json, at most 1 MiB,
// unknown fields and trailing data refused). Fields marked ? are optional.
//
//	method path                                        body                                          answer
//	POST   /admin/v1/instances                         {"id","driver","config"?,"capabilities"?}     201 {"id","driver","capabilities"}
//	GET    /admin/v1/threads?limit=&cursor=            -                                             200 {"threads":[thread],"nextCursor"?}
//	POST   /admin/v1/threads                           {"id","instance"?}                            201 thread+messages, Location
//	GET    /admin/v1/threads/{id}                      -                                             200 thread+messages
//	DELETE /admin/v1/threads/{id}                      -                                             200 {"id","status":"deleted"}
//	POST   /admin/v1/threads/{id}/provider-sessions    {"instance"}                                  201 {"providerSessionId","instance","driver","credentialId","endpoint","authorization","capabilities","reused":false}
//	                                                                                                 200 the same without "authorization", "reused":true, when (thread, instance) already has a live provider session
//	DELETE /admin/v1/provider-sessions/{id}            -                                             200 {"providerSessionId","status":"released"} (revoke its credentials, then close it)
//	POST   /admin/v1/threads/{id}/switch               {"instance"}                                  200 {"instance","previous","endedRun"?}
//	POST   /admin/v1/threads/{id}/rotate               {"instance"}                                  200 {"credentialId","authorization"}
//	POST   /admin/v1/threads/{id}/runs                 {"instance"}                                  201 {"runId"}
//	DELETE /admin/v1/threads/{id}/runs/current         -                                             200 thread+messages
//	POST   /admin/v1/threads/{id}/detach               - (ignored)                                   200 thread+messages
//	POST   /admin/v1/threads/{id}/archive              - (ignored)                                   200 thread+messages
//	GET    /admin/v1/clients?limit=&cursor=            -                                             200 {"clients":[client],"nextCursor"?}
//	POST   /admin/v1/clients                           {"label"?,"access"}                           201 {"clientId","token"}
//	GET    /admin/v1/clients/{id}                      -                                             200 client
//	POST   /admin/v1/clients/{id}/refresh              {"revokePrevious"?} or no body                200 {"token"}
//	DELETE /admin/v1/clients/{id}                      -                                             200 {"clientId","status":"revoked"}
//	GET    /admin/v1/sessions                          -                                             200 {"sessions":[session]}
//	POST   /admin/v1/oauth/pairing-codes               {"access"?} or no body (default "read-only")  201 {"code","access","expiresAt"}
//	GET    /admin/v1/backup                            -                                             200 the state file (application/octet-stream); 409 not_durable without one
//
// The thread listing is paged, ordered by id: limit (default 100, at most
// 1000; more is cut to 1000) threads after cursor (absent: from the first).
// "nextCursor", absent on the last page, is the cursor of the next one; it
// is opaque, and one no listing returned is 400 invalid_argument.
//
// The client listing is paged the same way, ordered by id. A client is
// {"id","kind","label","access","created","lastIssued","expires"?,
// "liveTokens","home"?}: every client grant, whoever made it — kind
// "admin" (POST /clients), "oauth" (a sign-in; label "oauth: <client
// name>") or "jwt" (an external issuer's subject; label "jwt: <sub>").
// lastIssued is when the grant last had a token issued, refreshed or (a
// JWT) first presented — nothing is written per request, so it is its
// last use to within a token's lifetime; expires is when its last live
// token (a refresh token included) stops, absent when one never expires
// or none is live; liveTokens counts its live access and refresh tokens;
// home is the node serving it (several nodes). No token, hash or code is
// in it. An unknown or revoked id is 404 unknown_client.
//
// A thread is {"id","status","instance","run","created"}: status is
// "active" or "archived", instance is "" until one is chosen, run is null
// or {"id","instance","started"}. GET and POST add "messages":
// [{"seq","text","author","instance"?,"at"}]. The instance's "config" is
// not echoed: it may hold the driver's secrets.
//
// A session is {"id","owner","created","lastActive","busy"}: the live
// sessions of Options.MCP, or, with no endpoint, the ownership records in
// the store, which do not know "busy" (then absent). Sessions carry no
// token.
//
// Every answer has a JSON body, so that every command of `runtime admin`
// prints one: a change of a thread (detach, archive, ending its run)
// answers the thread as it is after the change, a DELETE names what is
// gone and its status. Archiving an archived thread succeeds again. The
// provider-session answer names the instance and its driver: opening an
// inproc instance by mistake, where an exec one was meant, shows.
//
// A token ("authorization" or "token") appears only in the answer that
// minted it: opening a provider session (201), rotating, issuing or
// refreshing a client; a pairing code ("code") only in the answer that
// minted it. A pairing code approves one OAuth sign-in on the consent page
// (SPEC §5c): single-use, valid 5 minutes, with the access it grants. Every answer is sent with Cache-Control: no-store,
// and nothing the package logs includes a token or a header.
//
// GET /backup streams a consistent copy of the state file (SPEC §3.8),
// taken while the runtime goes on serving: a runtime started on it has
// the state of the moment the copy began. One runs at a time. A copy cut
// short aborts the connection, so a client never takes a truncated file
// for a whole one; `runtime admin backup FILE` writes it beside FILE,
// opens and reads it through before it renames it into place.
//
// # Errors
//
// Every error answer is {"error": code, "message": text}; the code is a
// stable snake_case string to branch on, the message is for people.
//
//	status code                         when
//	400    invalid_request              bad JSON, unknown field, data after the value, missing required field, empty body
//	400    invalid_id                   an id that is empty, too long, dots alone ("." or "..") or has characters outside [A-Za-z0-9._:@-]
//	400    invalid_argument             e.g. access other than "read-only" or "read-write"
//	400    unknown_driver               an instance's driver kind is not registered
//	400    invalid_driver_config        the driver refused the instance's config
//	502    provider_open_failed         the driver could not open the provider session
//	401    unauthorized                 missing or wrong admin token
//	403    forbidden                    Host or Origin not allowed (the admin listener of cmd/runtime, not this package)
//	404    not_found                    no such route (or a path with an empty or dot segment)
//	404    unknown_thread               unknown thread id (never created, or deleted)
//	404    unknown_instance             unknown provider instance
//	404    unknown_provider_session     provider session not open
//	404    unknown_client               unknown or revoked client grant
//	405    method_not_allowed           the route exists for other methods (Allow lists them)
//	409    thread_exists                POST /threads with an id in use
//	409    too_many_threads             POST /threads when the cap on threads (--max-threads) is reached
//	409    instance_exists              POST /instances with an id in use
//	409    thread_archived              changing an archived thread
//	409    run_active                   starting a run while one is active
//	409    not_current_instance         starting a run of an instance that is not the thread's current one
//	409    no_run                       ending a run when none is active
//	409    busy                         rotating while the pair's provider session is being opened
//	409    oauth_disabled               a pairing code when the runtime has no authorization server (no --public-origin, or --oauth-issuer)
//	409    not_durable                  GET /backup of a runtime without a state file (in memory, or several nodes on etcd)
//	409    not_home                     several nodes: the thread lives on another node, which the message names ("thread t1 lives on node n1"); ask that node
//	429    too_many_pairing_codes       a pairing code while 100 are outstanding (they expire after 5 minutes)
//	413    body_too_large               body over 1 MiB
//	415    unsupported_media_type       a body that is not application/json
//	500    internal                     anything else; the detail is logged, not returned
//	503    unavailable                  the runtime is closed, an actor or the request timed out, (several nodes) this node cannot prove its replica current, or a backup is already running
//
// The runtime's not_live (409), read_only (403) and credential_required
// (400) belong to mutations, which the admin API does not perform; they
// are mapped for completeness. OPTIONS on a route answers 204 with Allow.
package admin
