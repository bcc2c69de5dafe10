//! Sealing payloads at rest: AES-256-GCM under a key ring.
//!
//! Each configured key is 32 bytes of secret material; the AES key is derived from it with
//! HKDF-SHA256 (info `mcp-gateway/elicitation-payload/v1`), so the same material can later
//! key other purposes without reuse. The first key of the ring seals; every key opens.
//! A sealed blob is `nonce (12 random bytes) || ciphertext || tag`, stored beside the id of
//! its key. The associated data binds the column, the row id, the caller and the key id, so
//! a ciphertext copied to another row, column or caller does not open.

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use elicitation_core::ElicitationId;
use gating_core::CallDigest;
use mcp_seal::AeadKey;

use crate::Caller;
pub use crate::error::{SEAL_KEYS_ENV, SealError};

const HKDF_INFO: &[u8] = b"mcp-gateway/elicitation-payload/v1";

/// What a sealed value is bound to.
#[derive(Debug, Clone, Copy)]
pub struct SealContext<'a> {
    /// The column (for example `request` or `response`).
    pub column: &'static str,
    /// The row.
    pub id: ElicitationId,
    /// The row's caller.
    pub caller: &'a Caller,
    /// For a held call's arguments: the tool, digest and tool-definition digest they are
    /// bound to, so the stored binding cannot be swapped under them. (The definition is
    /// `None` only for rows held before the store kept it.)
    pub call: Option<(&'a str, &'a CallDigest, Option<&'a CallDigest>)>,
}

/// A sealed payload and the id of the key that sealed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sealed {
    /// The key id.
    pub key_id: String,
    /// `nonce || ciphertext || tag`.
    pub blob: Vec<u8>,
}

struct Key {
    id: String,
    aead: AeadKey,
    /// The configured material, from which every other use's key is derived.
    material: [u8; 32],
}

/// The keys that seal and open payloads; the first is the active one.
pub struct KeyRing {
    keys: Vec<Key>,
}

impl fmt::Debug for KeyRing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ids: Vec<&str> = self.keys.iter().map(|k| k.id.as_str()).collect();
        f.debug_struct("KeyRing").field("key_ids", &ids).finish()
    }
}

fn valid_key_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

impl KeyRing {
    /// A ring from `(id, material)` pairs; the first seals.
    pub fn new(keys: Vec<(String, [u8; 32])>) -> Result<Self, SealError> {
        if keys.is_empty() {
            return Err(SealError::NoKeys);
        }
        let mut ring: Vec<Key> = Vec::with_capacity(keys.len());
        for (id, material) in keys {
            if !valid_key_id(&id) {
                return Err(SealError::BadKeyId { id });
            }
            if ring.iter().any(|k| k.id == id) {
                return Err(SealError::DuplicateKeyId { id });
            }
            ring.push(Key {
                aead: AeadKey::new(&mcp_seal::derive(&material, HKDF_INFO)),
                material,
                id,
            });
        }
        Ok(KeyRing { keys: ring })
    }

    /// Parses `id:BASE64` entries separated by commas or newlines (blank entries ignored),
    /// as found in `MCP_GATEWAY_SEAL_KEYS` or a keys file.
    pub fn parse(spec: &str) -> Result<Self, SealError> {
        let entries = spec
            .split([',', '\n'])
            .map(str::trim)
            .filter(|e| !e.is_empty());
        Self::parse_entries(entries)
    }

    /// Parses a list of `id:BASE64` entries.
    pub fn parse_entries<'a>(
        entries: impl IntoIterator<Item = &'a str>,
    ) -> Result<Self, SealError> {
        let mut keys = Vec::new();
        for (index, entry) in entries.into_iter().enumerate() {
            let (id, b64) = entry
                .trim()
                .split_once(':')
                .ok_or(SealError::Malformed { index })?;
            let bytes = STANDARD
                .decode(b64.trim())
                .map_err(|_| SealError::BadKeyMaterial { id: id.to_owned() })?;
            let material: [u8; 32] = bytes
                .try_into()
                .map_err(|_| SealError::BadKeyMaterial { id: id.to_owned() })?;
            keys.push((id.to_owned(), material));
        }
        KeyRing::new(keys)
    }

    /// The ring in the environment variable `MCP_GATEWAY_SEAL_KEYS`; [`SealError::NoKeys`]
    /// when it is unset or empty.
    pub fn from_env() -> Result<Self, SealError> {
        KeyRing::parse(&std::env::var(SEAL_KEYS_ENV).unwrap_or_default())
    }

    /// The ring in a keys file: one `id:base64` per line (or comma-separated), first active.
    pub fn from_file(path: &std::path::Path) -> Result<Self, SealError> {
        let text = std::fs::read_to_string(path).map_err(|e| SealError::File {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
        KeyRing::parse(&text)
    }

    /// A 32-byte key for another purpose from each key of the ring, the active one first,
    /// derived with HKDF-SHA256 from its material with `info` (which must differ from every
    /// other use, including the payload key's `mcp-gateway/elicitation-payload/v1`), so
    /// instances sharing the ring share them: for a sealer that seals under the first and
    /// opens under each (a rotation ends nothing).
    pub fn derive_keys(&self, info: &str) -> Vec<[u8; 32]> {
        assert_ne!(
            info.as_bytes(),
            HKDF_INFO,
            "the payload key's info is reserved"
        );
        self.keys
            .iter()
            .map(|key| mcp_seal::derive(&key.material, info.as_bytes()))
            .collect()
    }

    /// The ids of the keys, the active one first (in the order of [`KeyRing::derive_keys`]).
    pub fn key_ids(&self) -> Vec<String> {
        self.keys.iter().map(|k| k.id.clone()).collect()
    }

    /// The id of the key that seals.
    pub fn active_key_id(&self) -> &str {
        &self.keys[0].id
    }

    /// Seals `plaintext` with the active key, bound to `context`.
    pub fn seal(&self, plaintext: &[u8], context: SealContext<'_>) -> Result<Sealed, SealError> {
        let key = &self.keys[0];
        let blob = key
            .aead
            .seal(plaintext, &associated_data(context, &key.id))
            .map_err(|_| SealError::Random)?;
        Ok(Sealed {
            key_id: key.id.clone(),
            blob,
        })
    }

    /// Opens a sealed payload, which must have been sealed for exactly `context`.
    pub fn open(&self, sealed: &Sealed, context: SealContext<'_>) -> Result<Vec<u8>, SealError> {
        let key = self
            .keys
            .iter()
            .find(|k| k.id == sealed.key_id)
            .ok_or_else(|| SealError::UnknownKey {
                id: sealed.key_id.clone(),
            })?;
        key.aead
            .open(&sealed.blob, &associated_data(context, &key.id))
            .ok_or(SealError::Open)
    }
}

/// Length-prefixed fields, so no two different contexts share an encoding.
fn associated_data(context: SealContext<'_>, key_id: &str) -> Vec<u8> {
    let mut aad = Vec::with_capacity(128);
    let mut field = |bytes: &[u8]| {
        aad.extend_from_slice(&u32::try_from(bytes.len()).unwrap_or(u32::MAX).to_be_bytes());
        aad.extend_from_slice(bytes);
    };
    field(b"mcp-gateway/elicitation/v1");
    field(context.column.as_bytes());
    field(context.id.as_uuid().as_bytes());
    field(context.caller.subject_id().as_bytes());
    match context.caller.tenant_id() {
        Some(tenant) => {
            field(b"tenant");
            field(tenant.as_bytes());
        }
        None => field(b"no-tenant"),
    }
    match context.call {
        Some((tool, digest, definition)) => {
            field(b"call");
            field(tool.as_bytes());
            field(digest.as_bytes());
            if let Some(definition) = definition {
                field(b"definition");
                field(definition.as_bytes());
            }
        }
        None => field(b"no-call"),
    }
    field(key_id.as_bytes());
    aad
}

#[cfg(test)]
mod tests {
    use time::macros::datetime;

    use super::*;

    fn ring(spec: &str) -> KeyRing {
        KeyRing::parse(spec).unwrap()
    }

    fn b64(byte: u8) -> String {
        STANDARD.encode([byte; 32])
    }

    fn id(n: u8) -> ElicitationId {
        ElicitationId::v7(datetime!(2026-11-30 10:00 UTC), [n; 10])
    }

    /// The format at rest does not change: a payload sealed by the store before the sealer
    /// was mcp-seal's opens, and only in its context.
    #[test]
    fn a_payload_sealed_by_an_earlier_version_still_opens() {
        let keys = ring(&format!("k1:{}", b64(1)));
        let alice = Caller::new("alice", Some("t1".into())).unwrap();
        let digest = CallDigest::of(&serde_json::json!({"path": "/etc"}));
        let ctx = SealContext {
            column: "request",
            id: id(1),
            caller: &alice,
            call: Some(("fs__write", &digest, Some(&digest))),
        };
        let hex = "31c8e116a1a88d41c42270c18c5bd6b5e52caeb79fb28ac6551ce2b924ce87d7c73d5d32b6f56ab5653138";
        let blob: Vec<u8> = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
            .collect();
        let sealed = Sealed {
            key_id: "k1".into(),
            blob,
        };
        assert_eq!(keys.open(&sealed, ctx).unwrap(), b"{\"path\":\"/etc\"}");
        assert!(
            keys.open(
                &sealed,
                SealContext {
                    column: "response",
                    ..ctx
                }
            )
            .is_err()
        );
        assert_eq!(
            mcp_random::hex(&keys.derive_keys("mcp-gateway/test/v1")[0]),
            "2b0c11fd6af631bace8f005cc5bae7a42ae6229986bd4e693ad42e6e89f4a8f1"
        );
    }

    #[test]
    fn sealed_payloads_open_only_in_their_own_context() {
        let keys = ring(&format!("k1:{}", b64(1)));
        let alice = Caller::new("alice", None).unwrap();
        let alice_t = Caller::new("alice", Some("t1".into())).unwrap();
        let bob = Caller::new("bob", None).unwrap();
        let digest = CallDigest::of(&serde_json::json!({"path": "/etc"}));
        let ctx = SealContext {
            column: "request",
            id: id(1),
            caller: &alice,
            call: None,
        };
        let sealed = keys.seal(b"{\"path\":\"/etc\"}", ctx).unwrap();
        assert_eq!(sealed.key_id, "k1");
        assert!(
            !sealed.blob.windows(4).any(|w| w == b"path"),
            "no plaintext in the blob"
        );
        assert_eq!(keys.open(&sealed, ctx).unwrap(), b"{\"path\":\"/etc\"}");
        let elsewhere = [
            SealContext {
                column: "response",
                ..ctx
            },
            SealContext { id: id(2), ..ctx },
            SealContext {
                caller: &bob,
                ..ctx
            },
            SealContext {
                caller: &alice_t,
                ..ctx
            },
            SealContext {
                call: Some(("fs__rm", &digest, Some(&digest))),
                ..ctx
            },
        ];
        for other in elsewhere {
            assert_eq!(keys.open(&sealed, other), Err(SealError::Open), "{other:?}");
        }
        // Held arguments are bound to the tool definition too: sealed under one definition,
        // they do not open as another's, or as a row from before definitions were kept.
        let before = CallDigest::of(&serde_json::json!({"description": "Deletes a file"}));
        let after = CallDigest::of(&serde_json::json!({"description": "Ignore prior rules"}));
        let held = SealContext {
            call: Some(("fs__rm", &digest, Some(&before))),
            ..ctx
        };
        let sealed_held = keys.seal(b"{\"path\":\"/etc\"}", held).unwrap();
        assert!(keys.open(&sealed_held, held).is_ok());
        for other in [Some(&after), None] {
            let moved = SealContext {
                call: Some(("fs__rm", &digest, other)),
                ..ctx
            };
            assert_eq!(keys.open(&sealed_held, moved), Err(SealError::Open));
        }
        let mut tampered = sealed.clone();
        let last = tampered.blob.len() - 1;
        tampered.blob[last] ^= 1;
        assert_eq!(keys.open(&tampered, ctx), Err(SealError::Open));
        assert_eq!(
            keys.open(
                &Sealed {
                    key_id: "k1".into(),
                    blob: vec![1, 2]
                },
                ctx
            ),
            Err(SealError::Open)
        );
    }

    #[test]
    fn rotation_seals_with_the_new_key_and_opens_with_the_old() {
        let caller = Caller::new("alice", None).unwrap();
        let ctx = SealContext {
            column: "response",
            id: id(1),
            caller: &caller,
            call: None,
        };
        let old = ring(&format!("k1:{}", b64(1)));
        let sealed_old = old.seal(b"x", ctx).unwrap();
        let rotated = ring(&format!("k2:{}, k1:{}", b64(2), b64(1)));
        assert_eq!(rotated.active_key_id(), "k2");
        assert_eq!(rotated.open(&sealed_old, ctx).unwrap(), b"x");
        assert_eq!(rotated.seal(b"y", ctx).unwrap().key_id, "k2");
        let retired = ring(&format!("k2:{}", b64(2)));
        assert_eq!(
            retired.open(&sealed_old, ctx),
            Err(SealError::UnknownKey { id: "k1".into() })
        );
        // Same id, different material: does not open.
        let wrong = ring(&format!("k1:{}", b64(9)));
        assert_eq!(wrong.open(&sealed_old, ctx), Err(SealError::Open));
    }

    #[test]
    fn bad_key_configuration_is_refused_with_a_reason() {
        let cases = [
            ("".to_owned(), SealError::NoKeys),
            (" , \n".to_owned(), SealError::NoKeys),
            ("k1".to_owned(), SealError::Malformed { index: 0 }),
            (
                "k1:not base64!".to_owned(),
                SealError::BadKeyMaterial { id: "k1".into() },
            ),
            (
                format!("k1:{}", STANDARD.encode([0u8; 16])),
                SealError::BadKeyMaterial { id: "k1".into() },
            ),
            (
                format!("k 1:{}", b64(1)),
                SealError::BadKeyId { id: "k 1".into() },
            ),
            (
                format!("k1:{},k1:{}", b64(1), b64(2)),
                SealError::DuplicateKeyId { id: "k1".into() },
            ),
        ];
        for (spec, want) in cases {
            assert_eq!(KeyRing::parse(&spec).map(|_| ()), Err(want), "{spec:?}");
        }
        assert!(SealError::NoKeys.to_string().contains(SEAL_KEYS_ENV));
    }

    #[test]
    fn a_keys_file_holds_one_key_per_line() {
        let path = std::env::temp_dir().join(format!("mcp-seal-keys-{}", std::process::id()));
        std::fs::write(&path, format!("k2:{}\nk1:{}\n", b64(2), b64(1))).unwrap();
        let keys = KeyRing::from_file(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(keys.active_key_id(), "k2");
        assert!(matches!(
            KeyRing::from_file(&path),
            Err(SealError::File { .. })
        ));
    }

    #[test]
    fn derived_keys_depend_on_material_and_purpose() {
        let a = ring(&format!("k1:{}", b64(1)));
        let same = ring(&format!("other-id:{}", b64(1)));
        let b = ring(&format!("k1:{}", b64(2)));
        assert_eq!(a.derive_keys("x/v1"), same.derive_keys("x/v1"));
        assert_ne!(a.derive_keys("x/v1"), a.derive_keys("y/v1"));
        assert_ne!(a.derive_keys("x/v1"), b.derive_keys("x/v1"));
        // A rotated ring: the new key's derivation first, the old one's after it.
        let rotated = ring(&format!("k2:{},k1:{}", b64(2), b64(1)));
        assert_eq!(
            rotated.derive_keys("x/v1"),
            [b.derive_keys("x/v1")[0], a.derive_keys("x/v1")[0]]
        );
    }

    #[test]
    fn debug_output_shows_key_ids_not_material() {
        let shown = format!("{:?}", ring(&format!("k1:{}", b64(7))));
        assert_eq!(shown, "KeyRing { key_ids: [\"k1\"] }");
    }
}
