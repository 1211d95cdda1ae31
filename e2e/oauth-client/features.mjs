// The official MCP TypeScript SDK client using the server features and the
// client features of MCP against examples/everything over Streamable HTTP
// with a bearer token, run by the Go test TestTypeScriptSDKFeatures
// (examples/everything/ts_client_test.go):
//
//   resources/list, resources/read of a text and a blob resource,
//   resources/templates/list and a template's read, resources/subscribe and
//   the notifications/resources/updated that follows, prompts/list,
//   prompts/get (with and without arguments), completion/complete, and
//   three tool calls whose handlers ask this client on the call's stream:
//   elicitation/create (answered accept with content), sampling/createMessage
//   (answered with a text) and roots/list (answered with one root).
//
// Environment: MCP_URL, MCP_TOKEN. It prints one JSON line per step,
// {"step",…what it got}, and a last line {"result":"ok"} (or
// {"result":"fail","step","message"}, exit 1). The Go test asserts on the
// content; this file checks only what it needs to go on.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import {
  CreateMessageRequestSchema,
  ElicitRequestSchema,
  ListRootsRequestSchema,
  ResourceUpdatedNotificationSchema,
} from '@modelcontextprotocol/sdk/types.js';

const { MCP_URL, MCP_TOKEN } = process.env;
if (!MCP_URL || !MCP_TOKEN) {
  console.error('MCP_URL and MCP_TOKEN are required');
  process.exit(2);
}

// The answers of this client's handlers; the Go test looks for them in the
// tools' results.
const ELICITED = { username: 'ts-sdk-user', email: 'ts-sdk-user@example.test' };
const SAMPLED = 'Paris, answered the TypeScript SDK client';
const ROOT = { uri: 'file:///tmp/ts-sdk-root', name: 'ts-sdk-root' };

let step = 'connect';
function log(fields) {
  console.log(JSON.stringify({ step, ...fields }));
}
function fail(message) {
  console.log(JSON.stringify({ result: 'fail', step, message }));
  process.exit(1);
}

const client = new Client(
  { name: 'ts-sdk-features-test', version: '1.0.0' },
  { capabilities: { elicitation: {}, sampling: {}, roots: {} } },
);
client.setRequestHandler(ElicitRequestSchema, async (req) => {
  log({ asked: 'elicitation/create', params: req.params });
  return { action: 'accept', content: ELICITED };
});
client.setRequestHandler(CreateMessageRequestSchema, async (req) => {
  log({ asked: 'sampling/createMessage', params: req.params });
  return { model: 'ts-sdk-test-model', role: 'assistant', content: { type: 'text', text: SAMPLED }, stopReason: 'endTurn' };
});
client.setRequestHandler(ListRootsRequestSchema, async (req) => {
  log({ asked: 'roots/list', params: req.params ?? null });
  return { roots: [ROOT] };
});
const updated = [];
let onUpdated = () => {};
client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => {
  updated.push(n.params.uri);
  onUpdated();
});

try {
  const transport = new StreamableHTTPClientTransport(new URL(MCP_URL), {
    requestInit: { headers: { Authorization: 'Bearer ' + MCP_TOKEN } },
  });
  await client.connect(transport);
  log({
    protocolVersion: transport.protocolVersion, sessionId: transport.sessionId !== undefined,
    server: client.getServerVersion(), capabilities: client.getServerCapabilities(),
  });

  step = 'resources/list';
  log({ resources: (await client.listResources()).resources });

  step = 'resources/read text';
  log({ contents: (await client.readResource({ uri: 'test://static-text' })).contents });

  step = 'resources/read blob';
  log({ contents: (await client.readResource({ uri: 'test://static-binary' })).contents });

  step = 'resources/templates/list';
  log({ resourceTemplates: (await client.listResourceTemplates()).resourceTemplates });

  step = 'resources/read template';
  log({ contents: (await client.readResource({ uri: 'test://template/ts-42/data' })).contents });

  // examples/everything says test://watched-resource changed every 3 s;
  // a subscribed session hears it.
  step = 'resources/subscribe';
  const heard = new Promise((resolve) => { onUpdated = resolve; });
  log({ answer: await client.subscribeResource({ uri: 'test://watched-resource' }) });
  step = 'notifications/resources/updated';
  await heard;
  log({ uris: updated });
  step = 'resources/unsubscribe';
  log({ answer: await client.unsubscribeResource({ uri: 'test://watched-resource' }) });

  step = 'prompts/list';
  log({ prompts: (await client.listPrompts()).prompts });

  step = 'prompts/get simple';
  log({ prompt: await client.getPrompt({ name: 'test_simple_prompt' }) });

  step = 'prompts/get arguments';
  log({ prompt: await client.getPrompt({ name: 'test_prompt_with_arguments', arguments: { arg1: 'alpha', arg2: 'beta' } }) });

  step = 'completion/complete';
  log({
    completion: (await client.complete({
      ref: { type: 'ref/prompt', name: 'test_prompt_with_arguments' }, argument: { name: 'arg1', value: 'test' },
    })).completion,
  });

  step = 'tools/list';
  log({ listed: (await client.listTools()).tools.map((t) => ({ name: t.name, outputSchema: t.outputSchema !== undefined, annotations: t.annotations ?? null })) });

  // The client validates structuredContent against the outputSchema it listed.
  step = 'outputSchema';
  log({ tool: await client.callTool({ name: 'report', arguments: { text: 'ship the release today' } }) });

  step = 'act';
  log({ tool: await client.callTool({ name: 'deploy', arguments: {} }) });

  step = 'elicitation';
  log({ tool: await client.callTool({ name: 'test_elicitation', arguments: { message: 'Who are you, TypeScript client?' } }) });

  step = 'sampling';
  log({ tool: await client.callTool({ name: 'test_sampling', arguments: { prompt: 'What is the capital of France?' } }) });

  step = 'roots';
  log({ tool: await client.callTool({ name: 'test_input_required_result_list_roots', arguments: {} }) });

  step = 'close';
  await transport.terminateSession();
  await client.close();
} catch (e) {
  fail(String(e?.stack ?? e));
}
console.log(JSON.stringify({ result: 'ok' }));
process.exit(0);
