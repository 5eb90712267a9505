// The official MCP TypeScript SDK client doing its OAuth flow against the
// backend, as a hosted connector would: the 401's WWW-Authenticate leads to
// the protected-resource metadata, that to the authorization server;
// dynamic client registration, authorization code with PKCE and the
// resource parameter; then it lists and calls tools.
//
// Usage: node client.mjs MCP_URL '{"calls":[{"name":..., "arguments":...}]}'
// Prints one JSON line: {tools, results, registeredClientId, scope, resource}.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { UnauthorizedError } from '@modelcontextprotocol/sdk/client/auth.js';

const mcpURL = new URL(process.argv[2]);
const { calls = [] } = JSON.parse(process.argv[3] ?? '{}');
const redirectUrl = 'http://127.0.0.1/callback';

// What the user's browser would do: follow the authorization server's
// redirects (keeping its cookies) through login and consent, up to the
// redirect back to the client with the code.
async function browse(start) {
  const cookies = new Map();
  let url = new URL(start);
  let seenResource;
  for (let i = 0; i < 20; i++) {
    if (url.searchParams.has('resource')) seenResource = url.searchParams.get('resource');
    if (url.href.startsWith(redirectUrl)) {
      if (url.searchParams.has('error')) throw new Error(`authorization failed: ${url.search}`);
      return { code: url.searchParams.get('code'), resource: seenResource };
    }
    const res = await fetch(url, {
      redirect: 'manual',
      headers: { cookie: [...cookies].map(([k, v]) => `${k}=${v}`).join('; ') },
    });
    for (const c of res.headers.getSetCookie()) {
      const [pair] = c.split(';');
      const eq = pair.indexOf('=');
      cookies.set(pair.slice(0, eq).trim(), pair.slice(eq + 1));
    }
    const loc = res.headers.get('location');
    if (!loc) throw new Error(`authorization stopped at ${url} with ${res.status}: ${await res.text()}`);
    url = new URL(loc, url);
  }
  throw new Error('too many redirects');
}

let authorized;
const store = {};
const provider = {
  get redirectUrl() { return redirectUrl; },
  get clientMetadata() {
    return {
      client_name: 'mcp-backend oauth test',
      redirect_uris: [redirectUrl],
      grant_types: ['authorization_code'],
      response_types: ['code'],
      token_endpoint_auth_method: 'none',
      application_type: 'native',
    };
  },
  clientInformation: () => store.client,
  saveClientInformation: (c) => { store.client = c; },
  tokens: () => store.tokens,
  saveTokens: (t) => { store.tokens = t; },
  saveCodeVerifier: (v) => { store.verifier = v; },
  codeVerifier: () => store.verifier,
  redirectToAuthorization: async (url) => {
    store.authorizationUrl = url.href;
    authorized = await browse(url);
  },
};

const client = new Client({ name: 'oauth-test-client', version: '1.0.0' });
try {
  await client.connect(new StreamableHTTPClientTransport(mcpURL, { authProvider: provider }));
} catch (err) {
  if (!(err instanceof UnauthorizedError) || !authorized) throw err;
  const transport = new StreamableHTTPClientTransport(mcpURL, { authProvider: provider });
  await transport.finishAuth(authorized.code);
  await client.connect(transport);
}
const { tools } = await client.listTools();
const results = [];
for (const c of calls) {
  const r = await client.callTool({ name: c.name, arguments: c.arguments ?? {} });
  results.push({ name: c.name, isError: r.isError ?? false, structuredContent: r.structuredContent ?? null });
}
await client.close();
const authURL = new URL(store.authorizationUrl);
process.stdout.write(JSON.stringify({
  tools: tools.map((t) => t.name),
  results,
  registeredClientId: store.client?.client_id,
  scope: store.tokens?.scope,
  resource: authURL.searchParams.get('resource'),
  codeChallengeMethod: authURL.searchParams.get('code_challenge_method'),
}) + '\n');
