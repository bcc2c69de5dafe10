//! Small state a client carries for the gateway, sealed (AES-256-GCM) so it can neither read
//! nor change it: `prefix` + base64url(nonce ‖ ciphertext of the JSON). Any instance with the
//! same key opens what another sealed. Each use has its own key (derived with its own
//! HKDF info) and its own associated data, so one kind never opens as another. A sealer
//! holds the keys of the seal-key ring (each derived alike): the first seals, every one
//! opens, so rotating the active key ends nothing sealed under the one before.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use mcp_seal::AeadKey;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// SHA-256 of a token the gateway handed out: what the store keeps of one that ended
/// (a session id, a page sign-in), never the token itself.
pub fn token_hash(token: &str) -> [u8; 32] {
    let digest = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
    let mut out = [0u8; 32];
    out.copy_from_slice(digest.as_ref());
    out
}

/// Tokens longer than this are refused unread.
const MAX_TOKEN: usize = 8 * 1024;

/// Seals and opens one kind of token.
pub struct Sealer {
    /// The first seals; each opens.
    keys: Vec<AeadKey>,
    prefix: &'static str,
    aad: &'static [u8],
}

impl Sealer {
    /// Tokens `prefix…` under `keys` (the first seals, every one opens; none: a random
    /// key), bound to `aad`.
    pub fn new(keys: &[[u8; 32]], prefix: &'static str, aad: &'static [u8]) -> Self {
        let mut keys: Vec<AeadKey> = keys.iter().map(AeadKey::new).collect();
        if keys.is_empty() {
            keys.push(AeadKey::new(&Self::random_key()));
        }
        Sealer { keys, prefix, aad }
    }

    /// A random key (tokens valid in this process only).
    pub fn random_key() -> [u8; 32] {
        // Made when the gateway starts: without a random source it cannot serve.
        mcp_random::bytes_or_abort::<32>()
    }

    /// The sealed token of `claims`; `None` if the random source failed.
    pub fn seal(&self, claims: &impl Serialize) -> Option<String> {
        let data = serde_json::to_vec(claims).ok()?;
        let blob = self.keys.first()?.seal(&data, self.aad).ok()?;
        Some(format!("{}{}", self.prefix, URL_SAFE_NO_PAD.encode(blob)))
    }

    /// The claims of a token this sealer made; `None` for anything else (another key,
    /// another kind, tampered, too long).
    pub fn open<T: DeserializeOwned>(&self, token: &str) -> Option<T> {
        if token.len() > MAX_TOKEN {
            return None;
        }
        let blob = token
            .strip_prefix(self.prefix)
            .and_then(|b64| URL_SAFE_NO_PAD.decode(b64).ok())?;
        self.keys.iter().find_map(|key| {
            let plain = key.open(&blob, self.aad)?;
            serde_json::from_slice(&plain).ok()
        })
    }
}

/// Each of `keys` derived for another purpose (see [`derive()`]), in order.
pub fn derive_all(keys: &[[u8; 32]], info: &str) -> Vec<[u8; 32]> {
    keys.iter().map(|key| derive(key, info)).collect()
}

/// A key for another purpose, derived from `key` with HKDF-SHA256 and `info`.
pub fn derive(key: &[u8; 32], info: &str) -> [u8; 32] {
    mcp_seal::derive(key, info.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Claims {
        sub: String,
    }

    /// The token format does not change: a token sealed before the sealer was mcp-seal's
    /// opens, and only as its kind.
    #[test]
    fn a_token_sealed_by_an_earlier_version_still_opens() {
        let key = derive(&[1u8; 32], "mcp-gateway/test/v1");
        let token = "a1.vE_aA8bGalixb2GpjS2UsKgvK1htzIoQfj_mqSUENSYsA6Yufx6ozu_S8g";
        let claims: Claims = Sealer::new(&[key], "a1.", b"aad").open(token).unwrap();
        assert_eq!(claims.sub, "alice");
        assert_eq!(Sealer::new(&[key], "a1.", b"b").open::<Claims>(token), None);
    }

    #[test]
    fn a_token_opens_only_under_its_key_and_kind_and_untouched() {
        let key = [1u8; 32];
        let a = Sealer::new(&[key], "a1.", b"a");
        let claims = Claims {
            sub: "alice".into(),
        };
        let token = a.seal(&claims).unwrap();
        assert!(!token.contains("alice"));
        assert_eq!(a.open::<Claims>(&token), Some(claims));
        assert_eq!(
            Sealer::new(&[[2u8; 32]], "a1.", b"a").open::<Claims>(&token),
            None
        );
        let other_kind = Sealer::new(&[key], "a1.", b"b");
        assert_eq!(other_kind.open::<Claims>(&token), None);
        let mut bytes = token.into_bytes();
        let i = bytes.len() / 2;
        bytes[i] = if bytes[i] == b'x' { b'y' } else { b'x' };
        assert_eq!(a.open::<Claims>(&String::from_utf8(bytes).unwrap()), None);
        assert_eq!(a.open::<Claims>(&"a1.A".repeat(4000)), None);
        assert_ne!(derive(&key, "one"), derive(&key, "two"));
    }

    /// Rotating the active key: what the old key sealed still opens while the old key is
    /// listed after the new one, and stops opening when it is dropped.
    #[test]
    fn a_token_sealed_under_the_old_key_opens_while_that_key_is_still_listed() {
        let (old, new) = ([4u8; 32], [5u8; 32]);
        let claims = Claims { sub: "bob".into() };
        let before = Sealer::new(&[old], "r1.", b"r").seal(&claims).unwrap();
        let rotated = Sealer::new(&[new, old], "r1.", b"r");
        assert_eq!(
            rotated.open::<Claims>(&before),
            Some(Claims { sub: "bob".into() })
        );
        let after = rotated.seal(&claims).unwrap();
        let dropped = Sealer::new(&[new], "r1.", b"r");
        assert_eq!(
            dropped.open::<Claims>(&after),
            Some(Claims { sub: "bob".into() }),
            "the new key seals"
        );
        assert_eq!(
            dropped.open::<Claims>(&before),
            None,
            "the old key dropped, its tokens end"
        );
    }

    #[test]
    fn a_token_has_one_spelling() {
        // What is remembered as used is the token's text, so another spelling of the same
        // bytes (base64 trailing bits) must not open.
        const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        let sealer = Sealer::new(&[[3u8; 32]], "t1.", b"t");
        for n in 0..8 {
            let claims = Claims { sub: "x".repeat(n) };
            let token = sealer.seal(&claims).unwrap();
            let body = &token[3..];
            if body.len().is_multiple_of(4) {
                continue;
            }
            let last = *body.as_bytes().last().unwrap();
            let value = ALPHABET.iter().position(|c| *c == last).unwrap();
            let respelled = ALPHABET[value ^ 1] as char;
            let other = format!("{}{respelled}", &token[..token.len() - 1]);
            assert_eq!(sealer.open::<Claims>(&other), None, "{token} / {other}");
        }
    }
}
