// A real OpenID provider for the tests: `oidc-provider` (npm, 9.x) on loopback, issuing JWT
// access tokens for the gateway with client_credentials, bound to the requested resource
// (RFC 8707) and signed with its own keys (RS256 and ES256), published at /jwks.
//
// usage: node idp.mjs PORT [GATEWAY_BASE]
// Prints one JSON line {"issuer": …} once it listens. Clients (client_credentials; a
// token's sub is the client id):
//   agent  / agent-secret   — may get mcp.tools mcp.approve mcp.ask
//   reader / reader-secret  — may get mcp.approve only
//   alice  / alice-secret   — may get mcp.tools (an agent acting as the person "alice")
//   notes-gw / notes-gw-secret — may get notes.read notes.write (the gateway, as a module's
//                             OAuth client)
// IDP_TTL: the access tokens' life in seconds (default 300).
// IDP_CONNECT: open dynamic client registration (RFC 7591; public clients with PKCE) and
// refresh tokens for every client that may use them — a module's authorization server, at
// which people connect their own accounts through the gateway (authorization code; the
// development login pages, where the login becomes the token's sub).
// With GATEWAY_BASE, also the approvals page's single sign-on client (authorization code
// with PKCE): approvals / approvals-secret, with the development login pages (any login
// and password; the login becomes the sub). Access tokens carry a `groups` claim: the person
// "bob" is in "sre", everyone else in no group.
import { generateKeyPairSync } from "node:crypto";
import Provider from "oidc-provider";

const port = Number(process.argv[2]);
const gateway = process.argv[3];
const issuer = `http://127.0.0.1:${port}`;
const key = (type, options, kid, alg) => ({
  ...generateKeyPairSync(type, options).privateKey.export({ format: "jwk" }),
  kid,
  alg,
  use: "sig",
});

const client = (id, scope) => ({
  client_id: id,
  client_secret: `${id}-secret`,
  grant_types: ["client_credentials"],
  redirect_uris: [],
  response_types: [],
  scope,
});

const provider = new Provider(issuer, {
  clients: [
    client("agent", "mcp.tools mcp.approve mcp.ask"),
    client("reader", "mcp.approve"),
    client("alice", "mcp.tools"),
    // The gateway itself, as a module's OAuth client (upstream client_credentials).
    client("notes-gw", "notes.read notes.write"),
    ...(gateway
      ? [
          {
            client_id: "approvals",
            client_secret: "approvals-secret",
            grant_types: ["authorization_code"],
            response_types: ["code"],
            redirect_uris: [`${gateway}/approvals/oidc/callback`],
            post_logout_redirect_uris: [`${gateway}/approvals`],
            scope: "openid mcp.approve",
          },
        ]
      : []),
  ],
  jwks: {
    keys: [
      key("ec", { namedCurve: "P-256" }, "ec-1", "ES256"),
      key("rsa", { modulusLength: 2048 }, "rsa-1", "RS256"),
    ],
  },
  scopes: ["openid", "mcp.tools", "mcp.approve", "mcp.ask", "notes.read", "notes.write"],
  ...(process.env.IDP_CONNECT
    ? { issueRefreshToken: async (_ctx, client) => client.grantTypeAllowed("refresh_token") }
    : {}),
  extraTokenClaims: async (_ctx, token) => ({ groups: token.accountId === "bob" ? ["sre"] : [] }),
  features: {
    devInteractions: { enabled: true },
    registration: { enabled: Boolean(process.env.IDP_CONNECT) },
    clientCredentials: { enabled: true },
    resourceIndicators: {
      enabled: true,
      defaultResource: () => undefined,
      useGrantedResource: () => true,
      // Any resource the client names becomes the token's audience: the gateway must refuse
      // a token meant for another resource.
      getResourceServerInfo: (_ctx, resource) => ({
        scope: "mcp.tools mcp.approve mcp.ask notes.read notes.write",
        audience: resource,
        accessTokenTTL: Number(process.env.IDP_TTL || 300),
        accessTokenFormat: "jwt",
        jwt: { sign: { alg: process.env.IDP_ALG || "ES256" } },
      }),
    },
  },
});

provider.listen(port, "127.0.0.1", () => {
  console.log(JSON.stringify({ issuer }));
});
