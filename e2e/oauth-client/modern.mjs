// The official MCP TypeScript SDK v2 client (@modelcontextprotocol/client)
// speaking MCP 2026-07-28 — no session — to a server over Streamable HTTP
// with a bearer token, run by the Go tests TestTypeScriptSDKModern
// (cmd/runtime/modern_clients_test.go, against `runtime serve --demo`) and
// TestTypeScriptSDKModernInput (examples/everything/modern_clients_test.go):
//
//   connect (server/discover, in the MCP_MODE asked: "pinned" is
//   versionNegotiation {pin: '2026-07-28'}, which never falls back;
//   "auto" probes and falls back to initialize unless the server is
//   modern), tools/list, one tools/call, subscriptions/listen with a
//   filter and the first notification that follows (the Go test makes
//   the change once it reads the "listen" line), and optionally a tool
//   that asks the client: input_required, answered by this client's
//   elicitation handler, retried with the sealed requestState.
//
// Environment: MCP_URL, MCP_TOKEN, MCP_MODE (pinned|auto), MCP_CALL
// ({"name","arguments"}), MCP_LISTEN (a subscriptions/listen filter),
// MCP_ASK ({"name","arguments"}, optional). It prints one JSON line per
// step, {"step",…what it got}, one line per HTTP exchange,
// {"step","http":{"method","rpc","version","status","sessionId",
// "requestState","inputResponses"}} (the JSON-RPC method, the
// MCP-Protocol-Version header sent, the status, whether either side named
// an Mcp-Session-Id, whether the request echoed a requestState and the
// keys of its inputResponses; no header value, no token), and a last
// line {"result":"ok"} (or {"result":"fail","step","message"}, exit 1).
// The Go tests assert on the content.
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';

const { MCP_URL, MCP_TOKEN, MCP_MODE, MCP_CALL, MCP_LISTEN, MCP_ASK } = process.env;
if (!MCP_URL || !MCP_TOKEN || !['pinned', 'auto'].includes(MCP_MODE) || !MCP_CALL || !MCP_LISTEN) {
  console.error('MCP_URL, MCP_TOKEN, MCP_MODE (pinned|auto), MCP_CALL and MCP_LISTEN are required');
  process.exit(2);
}
const call = JSON.parse(MCP_CALL);
const filter = JSON.parse(MCP_LISTEN);
const ask = MCP_ASK ? JSON.parse(MCP_ASK) : undefined;

// What this client's elicitation handler answers; the Go test looks for it
// in the asking tool's result.
const ELICITED = { username: 'ts-v2-user', email: 'ts-v2-user@example.test' };

let step = 'connect';
function log(fields) {
  console.log(JSON.stringify({ step, ...fields }));
}
function fail(message) {
  console.log(JSON.stringify({ result: 'fail', step, message }));
  process.exit(1);
}

// fetchLogged is the transport's fetch: it prints what each exchange says
// about the era (never a header's value).
async function fetchLogged(url, init = {}) {
  const headers = new Headers(init.headers);
  const res = await fetch(url, init);
  let rpc, params;
  if (typeof init.body === 'string') {
    try { ({ method: rpc, params } = JSON.parse(init.body)); } catch { /* not JSON */ }
  }
  log({
    http: {
      method: init.method ?? 'GET', rpc, version: headers.get('mcp-protocol-version'), status: res.status,
      sessionId: headers.has('mcp-session-id') || res.headers.has('mcp-session-id'),
      requestState: typeof params?.requestState === 'string', inputResponses: Object.keys(params?.inputResponses ?? {}),
    },
  });
  return res;
}

const mode = MCP_MODE === 'pinned' ? { pin: '2026-07-28' } : 'auto';
const client = new Client(
  { name: 'ts-sdk-v2-modern-test', version: '1.0.0' },
  { capabilities: { elicitation: {} }, versionNegotiation: { mode } },
);
client.setRequestHandler('elicitation/create', async (req) => {
  log({ asked: 'elicitation/create', params: req.params });
  return { action: 'accept', content: ELICITED };
});
const heard = [];
let onHeard = () => {};
for (const method of ['notifications/tools/list_changed', 'notifications/resources/updated']) {
  client.setNotificationHandler(method, (n) => {
    heard.push({ method, params: n.params ?? null });
    onHeard();
  });
}

try {
  const transport = new StreamableHTTPClientTransport(new URL(MCP_URL), {
    requestInit: { headers: { Authorization: 'Bearer ' + MCP_TOKEN } },
    fetch: fetchLogged,
  });
  await client.connect(transport);
  log({
    protocolVersion: client.getNegotiatedProtocolVersion(), era: client.getProtocolEra(),
    sessionId: transport.sessionId !== undefined, server: client.getServerVersion(),
  });

  step = 'tools/list';
  log({ tools: (await client.listTools()).tools.map((t) => t.name) });

  step = 'tools/call';
  log({ tool: await client.callTool(call) });

  step = 'listen';
  const first = new Promise((resolve) => { onHeard = resolve; });
  const sub = await client.listen(filter);
  log({ honoredFilter: sub.honoredFilter });
  step = 'notification';
  await first;
  log({ heard: heard[0] });
  await sub.close();
  step = 'listen closed';
  log({ closed: await sub.closed });

  if (ask) {
    step = 'input';
    log({ tool: await client.callTool(ask) });
  }

  step = 'close';
  log({ protocolVersion: client.getNegotiatedProtocolVersion(), era: client.getProtocolEra() });
  await client.close();
} catch (e) {
  fail(String(e?.stack ?? e));
}
console.log(JSON.stringify({ result: 'ok' }));
process.exit(0);
