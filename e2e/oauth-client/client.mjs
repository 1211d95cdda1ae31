// The official MCP TypeScript SDK client signing in to the runtime from
// nothing but its URL (SPEC §5c), run by the Go test TestTypeScriptSDKOAuth
// (cmd/runtime/oauth_ts_test.go) against `runtime serve`:
//
//   401 → protected-resource metadata → authorization-server metadata →
//   dynamic registration → consent (the "browser" step: this file opens
//   the consent page, types a pairing code from the admin API into its
//   form and submits it) → token → tools/list and a read tool → refresh →
//   the same MCP session still works → admin revoke → 401.
//
// Environment: MCP_URL, ADMIN_URL, ADMIN_TOKEN. It prints one JSON line per
// HTTP request it made ({"step","method","path","status"}: paths only, no
// query, no header, no body — no secret) and a last line {"result":…};
// it exits 0 when every step went as it should, 1 otherwise.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { auth, UnauthorizedError } from '@modelcontextprotocol/sdk/client/auth.js';

const { MCP_URL, ADMIN_URL, ADMIN_TOKEN } = process.env;
if (!MCP_URL || !ADMIN_URL || !ADMIN_TOKEN) {
  console.error('MCP_URL, ADMIN_URL and ADMIN_TOKEN are required');
  process.exit(2);
}
const origin = new URL(MCP_URL).origin;
let step = 'connect';

// fetchLogged is the fetch of the transport and of the OAuth flow: it
// prints each request's method, path and status.
async function fetchLogged(url, init = {}) {
  const u = new URL(url);
  const res = await fetch(url, init);
  let rpc;
  if (u.pathname.endsWith('/mcp') && typeof init.body === 'string') {
    try { rpc = JSON.parse(init.body).method; } catch { /* not JSON */ }
  }
  console.log(JSON.stringify({ step, method: init.method ?? 'GET', path: u.pathname, rpc, status: res.status }));
  return res;
}

function fail(message) {
  console.log(JSON.stringify({ result: 'fail', step, message }));
  process.exit(1);
}

// admin calls the admin API.
async function admin(method, path, body) {
  const res = await fetch(ADMIN_URL + path, {
    method,
    headers: { Authorization: `Bearer ${ADMIN_TOKEN}`, 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  console.log(JSON.stringify({ step, method, path, status: res.status, admin: true }));
  if (!res.ok) fail(`admin ${method} ${path}: ${res.status}`);
  return res.json();
}

// The "browser": it opens the consent page, fills its one text input with
// a pairing code and submits the form with its hidden fields.
async function approve(authorizationUrl) {
  const page = await fetchLogged(authorizationUrl.href, { redirect: 'manual' });
  const html = await page.text();
  if (page.status !== 200) fail(`consent page: ${page.status}`);
  const action = /<form method="post" action="([^"]+)"/.exec(html)?.[1];
  const fields = new URLSearchParams();
  for (const m of html.matchAll(/<input type="hidden" name="([^"]+)" value="([^"]*)">/g)) fields.set(m[1], m[2]);
  if (!action || !fields.get('request') || !fields.get('csrf')) fail('consent page: no form');
  if (!html.includes('name="pairing_code"')) fail('consent page: no pairing code input');
  const { code } = await admin('POST', '/admin/v1/oauth/pairing-codes', { access: 'read-only' });
  fields.set('pairing_code', code);
  fields.set('action', 'approve');
  const res = await fetchLogged(action, {
    method: 'POST', redirect: 'manual', body: fields,
    headers: { 'Content-Type': 'application/x-www-form-urlencoded', Origin: origin },
  });
  if (res.status !== 303) fail(`consent submit: ${res.status}`);
  const back = new URL(res.headers.get('location'));
  if (back.searchParams.get('iss') !== origin) fail('the redirect has no iss of this issuer (RFC 9207)');
  if (back.searchParams.get('state') !== provider.lastState) fail('the redirect has another state');
  return back.searchParams.get('code');
}

// provider keeps everything in memory; redirectToAuthorization approves
// until the grant is revoked, then refuses (a person would have to sign in
// again).
const provider = {
  allowConsent: true,
  authorizationCode: undefined,
  lastState: undefined,
  _client: undefined,
  _tokens: undefined,
  _verifier: undefined,
  get redirectUrl() { return 'http://127.0.0.1:33418/callback'; },
  get clientMetadata() {
    return {
      client_name: 'TypeScript SDK test client', redirect_uris: ['http://127.0.0.1:33418/callback'],
      grant_types: ['authorization_code', 'refresh_token'], response_types: ['code'], token_endpoint_auth_method: 'none',
    };
  },
  state() { this.lastState = `state-${Math.random().toString(36).slice(2)}`; return this.lastState; },
  clientInformation() { return this._client; },
  saveClientInformation(info) { this._client = info; },
  tokens() { return this._tokens; },
  saveTokens(tokens) { this._tokens = tokens; },
  saveCodeVerifier(v) { this._verifier = v; },
  codeVerifier() { return this._verifier; },
  async redirectToAuthorization(url) {
    if (!this.allowConsent) {
      console.log(JSON.stringify({ step, redirect: 'consent refused: the grant was revoked' }));
      return;
    }
    if (url.searchParams.get('code_challenge_method') !== 'S256') fail('no PKCE S256');
    if (url.searchParams.get('resource') !== MCP_URL) fail(`resource ${url.searchParams.get('resource')}, want ${MCP_URL}`);
    this.authorizationCode = await approve(url);
  },
};

function transport(sessionId) {
  return new StreamableHTTPClientTransport(new URL(MCP_URL), { authProvider: provider, fetch: fetchLogged, sessionId });
}

const client = new Client({ name: 'ts-sdk-oauth-test', version: '1.0.0' });
try {
  await client.connect(transport());
  fail('connected without signing in');
} catch (e) {
  if (!(e instanceof UnauthorizedError) || !provider.authorizationCode) fail(`first connect: ${e}`);
}
step = 'token';
const t0 = transport();
await t0.finishAuth(provider.authorizationCode);
if (!provider.tokens()?.access_token?.startsWith('mcprc_') || !provider.tokens()?.refresh_token) fail('no client-grant access token and refresh token');

step = 'tools';
const session = new Client({ name: 'ts-sdk-oauth-test', version: '1.0.0' });
const tr = transport();
await session.connect(tr);
const sessionId = tr.sessionId;
const tools = await session.listTools();
if (!tools.tools.some((t) => t.name === 'thread_list')) fail('tools/list has no thread_list');
const caps = await session.callTool({ name: 'runtime_capabilities', arguments: {} });
const grant = caps.structuredContent?.clientId;
if (caps.isError || caps.structuredContent?.namespaceKind !== 'client' || !grant) fail(`runtime_capabilities: ${JSON.stringify(caps)}`);
const list = await session.callTool({ name: 'thread_list', arguments: {} });
if (list.isError) fail('thread_list refused');

step = 'refresh';
const before = provider.tokens();
const outcome = await auth(provider, { serverUrl: MCP_URL, fetchFn: fetchLogged });
const after = provider.tokens();
if (outcome !== 'AUTHORIZED' || after.access_token === before.access_token || after.refresh_token === before.refresh_token) {
  fail('refresh did not issue a new access token and rotate the refresh token');
}
step = 'same-session';
const again = await session.callTool({ name: 'runtime_capabilities', arguments: {} });
if (tr.sessionId !== sessionId || again.structuredContent?.clientId !== grant) fail('the session after the refresh is not the same grant\'s');

step = 'revoke';
await admin('DELETE', `/admin/v1/clients/${grant}`);
provider.allowConsent = false;
step = 'after-revoke';
try {
  await session.callTool({ name: 'thread_list', arguments: {} });
  fail('a call after revocation succeeded');
} catch (e) {
  // The SDK tries its refresh token, which went with the grant, and then
  // a sign-in this "person" declines: invalid_grant, or unauthorized.
  if (!(e instanceof UnauthorizedError) && e?.name !== 'InvalidGrantError') fail(`after revocation: ${e}`);
}
const res = await fetchLogged(MCP_URL, {
  method: 'POST',
  headers: { Authorization: `Bearer ${after.access_token}`, 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream', 'Mcp-Session-Id': sessionId, 'MCP-Protocol-Version': '2025-11-25' },
  body: JSON.stringify({ jsonrpc: '2.0', id: 99, method: 'ping' }),
});
const challenge = res.headers.get('www-authenticate') ?? '';
if (res.status !== 401 || !challenge.includes('resource_metadata=')) fail(`the revoked token: ${res.status} ${challenge}`);
console.log(JSON.stringify({ result: 'ok', grant, sessionId }));
await session.close().catch(() => {});
process.exit(0);
