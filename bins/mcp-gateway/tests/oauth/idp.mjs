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
// Token exchange (RFC 8693): exchange-gw / exchange-gw-secret exchanges an access token this
// provider issued (subject_token) for a JWT access token of the same sub whose audience is
// the requested resource, with the scopes asked for among notes.read notes.write, and
// `act.sub` the exchanging client.
// IDP_CONNECT: open dynamic client registration (RFC 7591; public clients with PKCE) and
// refresh tokens for every client that may use them — a module's authorization server, at
// which people connect their own accounts through the gateway (authorization code; the
// development login pages, where the login becomes the token's sub).
// With GATEWAY_BASE, also the approvals page's single sign-on client (authorization code
// with PKCE): approvals / approvals-secret, with the development login pages (any login
// and password; the login becomes the sub). Access tokens carry a `groups` claim: the person
// "bob" is in "sre", everyone else in no group.
import { generateKeyPairSync, randomUUID } from "node:crypto";
import * as jose from "jose";
import Provider, { errors } from "oidc-provider";

const port = Number(process.argv[2]);
const gateway = process.argv[3];
const issuer = `http://127.0.0.1:${port}`;
const ecKey = generateKeyPairSync("ec", { namedCurve: "P-256" });
const key = (type, options, kid, alg) => ({
  ...generateKeyPairSync(type, options).privateKey.export({ format: "jwk" }),
  kid,
  alg,
  use: "sig",
});

const TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange";
const ACCESS_TOKEN = "urn:ietf:params:oauth:token-type:access_token";
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
    // The gateway exchanging its callers' tokens for a module's (token_exchange).
    { ...client("exchange-gw", "notes.read notes.write"), grant_types: [TOKEN_EXCHANGE] },
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
      { ...ecKey.privateKey.export({ format: "jwk" }), kid: "ec-1", alg: "ES256", use: "sig" },
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

// RFC 8693: the subject token must be one of this provider's access tokens (its signature,
// issuer and expiry checked); the new token is the same person's, for the resource asked.
const ownKeys = jose.createLocalJWKSet({
  keys: [{ ...ecKey.publicKey.export({ format: "jwk" }), kid: "ec-1", alg: "ES256" }],
});
provider.registerGrantType(
  TOKEN_EXCHANGE,
  async (ctx) => {
    const params = ctx.oidc.params;
    if (params.subject_token_type !== ACCESS_TOKEN) {
      throw new errors.InvalidRequest("subject_token_type must be an access token");
    }
    let subject;
    try {
      ({ payload: subject } = await jose.jwtVerify(params.subject_token, ownKeys, { issuer }));
    } catch (e) {
      throw new errors.InvalidGrant(`subject_token is not valid: ${e.code || e.message}`);
    }
    const resource = params.resource;
    if (!resource) throw new errors.InvalidTarget("a resource is required");
    const allowed = new Set(["notes.read", "notes.write"]);
    const scope = (params.scope || "").split(" ").filter((s) => allowed.has(s)).join(" ");
    const ttl = Number(process.env.IDP_TTL || 300);
    const accessToken = await new jose.SignJWT({
      scope,
      client_id: ctx.oidc.client.clientId,
      act: { sub: ctx.oidc.client.clientId },
    })
      .setProtectedHeader({ alg: "ES256", kid: "ec-1", typ: "at+jwt" })
      .setIssuer(issuer)
      .setSubject(subject.sub)
      .setAudience(resource)
      .setIssuedAt()
      .setExpirationTime(`${ttl}s`)
      .setJti(randomUUID())
      .sign(ecKey.privateKey);
    ctx.body = {
      access_token: accessToken,
      issued_token_type: ACCESS_TOKEN,
      token_type: "Bearer",
      expires_in: ttl,
      scope,
    };
  },
  new Set(["subject_token", "subject_token_type", "requested_token_type", "resource", "scope", "audience"]),
);

provider.listen(port, "127.0.0.1", () => {
  console.log(JSON.stringify({ issuer }));
});
