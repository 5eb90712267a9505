// A real authorization server for the Go tests of the OAuth protected
// resource: oidc-provider (OpenID certified) issuing JWT access tokens for
// resource indicators, by client credentials and by authorization code with
// PKCE, with dynamic client registration for MCP clients.
//
// Usage: node server.mjs '{"resources":["http://127.0.0.1:PORT/mcp", ...]}'
//
// It starts two issuers on ephemeral loopback ports that sign with the SAME
// key (so a token of the second one has a valid signature and a wrong
// issuer), prints one JSON line {issuer, otherIssuer} once both listen, and
// exits when its standard input closes.
import http from 'node:http';
import { generateKeyPairSync } from 'node:crypto';
import Provider, { errors } from 'oidc-provider';

const opts = JSON.parse(process.argv[2] ?? '{}');
const resources = new Set(opts.resources ?? []);
const scope = opts.scope ?? 'mcp:read mcp:write mcp:exec';

const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
const signingKey = { ...privateKey.export({ format: 'jwk' }), kid: 'as-key-1', use: 'sig', alg: 'RS256' };

function configuration() {
  return {
    jwks: { keys: [signingKey] },
    clients: [
      {
        // The operator's client for mcpctl-like tools: client credentials.
        client_id: 'operator',
        client_secret: 'operator-secret-0123456789',
        grant_types: ['client_credentials'],
        response_types: [],
        redirect_uris: [],
        scope,
      },
      {
        // A pre-registered public client: authorization code + PKCE.
        client_id: 'app',
        token_endpoint_auth_method: 'none',
        grant_types: ['authorization_code'],
        response_types: ['code'],
        redirect_uris: ['http://127.0.0.1/callback'],
        application_type: 'native',
        scope,
      },
    ],
    scopes: ['openid', ...scope.split(' ')],
    pkce: { required: () => true },
    features: {
      clientCredentials: { enabled: true },
      registration: { enabled: true },
      devInteractions: { enabled: false },
      resourceIndicators: {
        enabled: true,
        defaultResource: () => undefined,
        useGrantedResource: () => true,
        getResourceServerInfo: (ctx, indicator) => {
          if (!resources.has(indicator)) {
            throw new errors.InvalidTarget(`unknown resource ${indicator}`);
          }
          return {
            scope,
            audience: indicator,
            accessTokenTTL: 600,
            accessTokenFormat: 'jwt',
            jwt: { sign: { alg: 'RS256' } },
          };
        },
      },
    },
    interactions: { url: (ctx, interaction) => `/interaction/${interaction.uid}` },
    findAccount: (ctx, sub) => ({ accountId: sub, claims: () => ({ sub }) }),
    // No browser here: the interaction below logs "alice" in and grants
    // what the client asked for.
    loadExistingGrant: undefined,
  };
}

// interact completes login and consent without a page: the user is alice
// and grants every scope asked for, for the resources asked for.
async function interact(provider, req, res) {
  const details = await provider.interactionDetails(req, res);
  const { prompt, params, session, grantId } = details;
  if (prompt.name === 'login') {
    return provider.interactionFinished(req, res, { login: { accountId: 'alice' } }, { mergeWithLastSubmission: false });
  }
  const grant = grantId ? await provider.Grant.find(grantId) : new provider.Grant({ accountId: session.accountId, clientId: params.client_id });
  const d = prompt.details;
  if (d.missingOIDCScope) grant.addOIDCScope(d.missingOIDCScope.join(' '));
  if (d.missingOIDCClaims) grant.addOIDCClaims(d.missingOIDCClaims);
  for (const [indicator, scopes] of Object.entries(d.missingResourceScopes ?? {})) {
    grant.addResourceScope(indicator, scopes.join(' '));
  }
  const id = await grant.save();
  return provider.interactionFinished(req, res, { consent: { grantId: id } }, { mergeWithLastSubmission: true });
}

async function start() {
  const server = http.createServer();
  await new Promise((ok) => server.listen(0, '127.0.0.1', ok));
  const issuer = `http://127.0.0.1:${server.address().port}`;
  const provider = new Provider(issuer, configuration());
  provider.on('server_error', (ctx, err) => console.error('server_error', err));
  const callback = provider.callback();
  server.on('request', (req, res) => {
    if (req.url.startsWith('/interaction/')) {
      interact(provider, req, res).catch((err) => {
        console.error('interaction', err);
        res.statusCode = 500;
        res.end(String(err));
      });
      return;
    }
    callback(req, res);
  });
  return { issuer, server };
}

const main = await start();
const other = await start();
process.stdout.write(JSON.stringify({ issuer: main.issuer, otherIssuer: other.issuer }) + '\n');
process.stdin.on('end', () => process.exit(0));
process.stdin.on('close', () => process.exit(0));
process.stdin.resume();
