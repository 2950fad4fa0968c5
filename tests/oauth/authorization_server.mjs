// A real authorization server for the OAuth tier: npm `oidc-provider` on
// 127.0.0.1, with dynamic client registration, PKCE, resource indicators
// (access tokens bound to the MCP server), refresh token rotation, `iss` in
// the authorization response, short access tokens, token introspection and
// revocation. Consent is granted by the few lines of interaction code below,
// so a browser that only follows redirects (curl) completes a login.
//
//   node authorization_server.mjs RESOURCE_URL ACCESS_TOKEN_TTL_SECONDS
//
// Prints `issuer http://127.0.0.1:PORT` once it listens.
import http from 'node:http';
import Provider from 'oidc-provider';

const [resource, ttlArg] = process.argv.slice(2);
const ttl = Number(ttlArg || 10);
const scope = 'mcp:tools';

const server = http.createServer();
await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
const issuer = `http://127.0.0.1:${server.address().port}`;

const provider = new Provider(issuer, {
  clients: [
    // The MCP server's own client, for introspection.
    { client_id: 'mcp-server', client_secret: 'mcp-server-secret', redirect_uris: [], response_types: [], grant_types: [] },
  ],
  scopes: ['openid', 'offline_access', scope],
  features: {
    devInteractions: { enabled: false },
    registration: { enabled: true },
    introspection: { enabled: true },
    revocation: { enabled: true },
    resourceIndicators: {
      enabled: true,
      defaultResource: () => resource,
      useGrantedResource: () => true,
      getResourceServerInfo: (_ctx, indicator) => {
        if (indicator !== resource) throw new Error(`unknown resource ${indicator}`);
        return { scope, audience: resource, accessTokenTTL: ttl, accessTokenFormat: 'opaque' };
      },
    },
  },
  ttl: { AccessToken: ttl, RefreshToken: 3600, Grant: 3600, Session: 3600, Interaction: 600, AuthorizationCode: 60 },
  rotateRefreshToken: true,
  issueRefreshToken: async (_ctx, client) => client.grantTypeAllowed('refresh_token'),
  interactions: { url: (_ctx, interaction) => `/interaction/${interaction.uid}` },
});

// Approves every login and every consent at once: the tier's "person".
async function interact(req, res) {
  const details = await provider.interactionDetails(req, res);
  if (details.prompt.name === 'login') {
    await provider.interactionFinished(req, res, { login: { accountId: 'tester' } }, { mergeWithLastSubmission: false });
    return;
  }
  const grant = details.grantId
    ? await provider.Grant.find(details.grantId)
    : new provider.Grant({ accountId: details.session.accountId, clientId: details.params.client_id });
  const missing = details.prompt.details;
  if (missing.missingOIDCScope) grant.addOIDCScope(missing.missingOIDCScope.join(' '));
  for (const [indicator, scopes] of Object.entries(missing.missingResourceScopes || {})) {
    grant.addResourceScope(indicator, scopes.join(' '));
  }
  const grantId = await grant.save();
  await provider.interactionFinished(req, res, { consent: { grantId } }, { mergeWithLastSubmission: true });
}

const callback = provider.callback();
server.on('request', (req, res) => {
  if (req.url.startsWith('/interaction/')) {
    interact(req, res).catch((err) => {
      res.statusCode = 500;
      res.end(String(err));
    });
    return;
  }
  callback(req, res);
});
provider.on('server_error', (_ctx, err) => console.error('server_error', err));
console.log(`issuer ${issuer}`);
