//! The bench's own issuer for the `jwt` rows: an ES256 key made at start, its JWKS written to
//! a file the gateway reads (`jwks_file`), and access tokens signed here — one reused for
//! every call (the gateway remembers a verified token) or a new one per call (first sight:
//! a signature check per call). Tokens are signed before a row is measured, so signing costs
//! the load generator nothing while it runs.

use std::path::Path;

use anyhow::{Context, Result};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use ring::rand::SystemRandom;
use ring::signature::{self, EcdsaKeyPair, KeyPair as _};
use serde_json::json;

/// The issuer the tokens name.
pub(crate) const ISSUER: &str = "https://bench-idp.invalid/";
/// The gateway's resource (the tokens' audience).
pub(crate) const RESOURCE: &str = "http://127.0.0.1/mcp";
const KID: &str = "bench-es256";

/// An ES256 signing key and its issuer.
pub(crate) struct Issuer {
    pair: EcdsaKeyPair,
    rng: SystemRandom,
}

impl Issuer {
    /// A new key.
    pub(crate) fn new() -> Result<Issuer> {
        let rng = SystemRandom::new();
        let alg = &signature::ECDSA_P256_SHA256_FIXED_SIGNING;
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(alg, &rng)
            .map_err(|_| anyhow::anyhow!("cannot make an ES256 key"))?;
        let pair = EcdsaKeyPair::from_pkcs8(alg, pkcs8.as_ref(), &rng)
            .map_err(|_| anyhow::anyhow!("cannot read the ES256 key"))?;
        Ok(Issuer { pair, rng })
    }

    /// Writes the key set (the public key) to `path`.
    pub(crate) fn write_jwks(&self, path: &Path) -> Result<()> {
        let point = self.pair.public_key().as_ref();
        let set = json!({"keys": [{"kty": "EC", "crv": "P-256", "kid": KID, "use": "sig",
            "alg": "ES256", "x": B64.encode(&point[1..33]), "y": B64.encode(&point[33..65])}]});
        std::fs::write(path, set.to_string()).context("write the bench's JWKS")
    }

    /// The `[auth]` section of a gateway that trusts this issuer, its keys at `jwks`.
    pub(crate) fn auth_section(jwks: &Path) -> String {
        format!(
            "[auth]\nmode = \"jwt\"\n[auth.jwt]\nresource = \"{RESOURCE}\"\n[[auth.jwt.issuers]]\nissuer = \"{ISSUER}\"\nname = \"bench\"\njwks_file = \"{}\"\nalgorithms = [\"ES256\"]\n",
            jwks.display()
        )
    }

    /// An access token of `sub` with `tools:call`, valid for an hour; `n` makes it unique.
    pub(crate) fn token(&self, sub: &str, n: usize) -> Result<String> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_secs();
        let header = json!({"alg": "ES256", "typ": "at+jwt", "kid": KID});
        let claims = json!({"iss": ISSUER, "aud": RESOURCE, "sub": sub, "iat": now,
            "exp": now + 3600, "scope": "tools:call", "jti": format!("bench-{n}")});
        let input = format!(
            "{}.{}",
            B64.encode(header.to_string()),
            B64.encode(claims.to_string())
        );
        let signature = self
            .pair
            .sign(&self.rng, input.as_bytes())
            .map_err(|_| anyhow::anyhow!("cannot sign a token"))?;
        Ok(format!("{input}.{}", B64.encode(signature.as_ref())))
    }

    /// `count` distinct tokens of `sub`, numbered from `from`.
    pub(crate) fn tokens(&self, sub: &str, from: usize, count: usize) -> Result<Vec<String>> {
        (from..from + count).map(|n| self.token(sub, n)).collect()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use mcp_auth::jwt::{Algorithm, IssuerConfig, JwksSource, JwtAuth, JwtConfig, ScopeNames};
    use std::time::Duration;

    /// The rows measure what they say only if the gateway accepts these tokens: the
    /// verifier the gateway uses takes each, as `bench@bench` with `tools:call`, and each
    /// new token is a different one (first sight is a new token every call).
    #[tokio::test]
    async fn the_gateways_verifier_accepts_the_benchs_tokens() {
        let dir = std::env::temp_dir().join(format!("mcp-bench-jwt-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let issuer = Issuer::new().unwrap();
        let jwks = dir.join("jwks.json");
        issuer.write_jwks(&jwks).unwrap();
        let auth = JwtAuth::new(JwtConfig {
            resource: RESOURCE.into(),
            issuers: vec![IssuerConfig {
                issuer: ISSUER.into(),
                name: "bench".into(),
                jwks: JwksSource::File(jwks),
                algorithms: vec![Algorithm::ES256],
                grace: Duration::from_secs(60),
                refresh_interval: Duration::from_secs(300),
                min_refresh_interval: Duration::ZERO,
            }],
            scopes: ScopeNames::default(),
            tenant_claim: None,
            groups_claim: "groups".into(),
            leeway: Duration::from_secs(30),
        })
        .unwrap();
        let tokens = issuer.tokens("bench", 1, 3).unwrap();
        assert_eq!(
            tokens
                .iter()
                .collect::<std::collections::HashSet<_>>()
                .len(),
            3
        );
        for token in &tokens {
            let principal = auth.principal(token).await.unwrap();
            assert_eq!(principal.caller.subject_id(), "bench@bench");
            assert!(principal.require(mcp_auth::SCOPE_TOOLS_CALL).is_ok());
        }
        // Another key's token is refused: the verifier checks the signature.
        let other = Issuer::new().unwrap().token("bench", 0).unwrap();
        assert!(auth.principal(&other).await.is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
