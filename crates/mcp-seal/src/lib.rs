//! The one way the gateway seals: AES-256-GCM with a fresh random 96-bit nonce, the sealed
//! blob `nonce ‖ ciphertext ‖ tag`, bound to associated data the caller gives; and the one
//! key derivation, HKDF-SHA256 with an empty salt and an `info` per use, so one key's
//! material keys many uses without reuse.
//!
//! Two formats stand on it, unchanged: the store's payloads at rest
//! (`elicitation_store::KeyRing`: the blob beside its key id, the associated data binding
//! the row, column, caller and key) and the tokens the gateway hands out
//! (`mcp_auth::sealed::Sealer`: `prefix` + base64url of the blob). Their tests open blobs
//! sealed before this crate existed.
//!
//! # Example
//!
//! ```
//! use mcp_seal::{AeadKey, derive};
//!
//! let material = [7u8; 32]; // from the operator's key ring
//! let key = AeadKey::new(&derive(&material, b"orders/notes"));
//! let sealed = key.seal(b"refund approved by carol", b"order 1042")?;
//! assert_eq!(key.open(&sealed, b"order 1042").as_deref(), Some(&b"refund approved by carol"[..]));
//! assert_eq!(key.open(&sealed, b"order 1043"), None, "bound to its associated data");
//! # Ok::<(), mcp_seal::Unavailable>(())
//! ```

use ring::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use ring::hkdf::{HKDF_SHA256, KeyType, Salt};

pub use mcp_random::Unavailable;

/// The 32-byte key for the use `info`, derived from `material` with HKDF-SHA256 (empty salt).
pub fn derive(material: &[u8; 32], info: &[u8]) -> [u8; 32] {
    struct Len;
    impl KeyType for Len {
        fn len(&self) -> usize {
            32
        }
    }
    let info = [info];
    let mut out = [0u8; 32];
    Salt::new(HKDF_SHA256, &[])
        .extract(material)
        .expand(&info, Len)
        .and_then(|okm| okm.fill(&mut out))
        .expect("32 bytes is a valid HKDF-SHA256 output length");
    out
}

/// One AES-256-GCM key.
pub struct AeadKey {
    key: LessSafeKey,
}

/// Names nothing: a key is never printed.
impl std::fmt::Debug for AeadKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AeadKey")
    }
}

impl AeadKey {
    /// The key `bytes`.
    pub fn new(bytes: &[u8; 32]) -> Self {
        AeadKey {
            key: LessSafeKey::new(
                UnboundKey::new(&AES_256_GCM, bytes).expect("AES-256 keys are 32 bytes"),
            ),
        }
    }

    /// `plaintext` sealed under a fresh random nonce, bound to `aad`: `nonce ‖ ciphertext ‖
    /// tag`. Fails only when the system's random source does (never a fixed nonce).
    pub fn seal(&self, plaintext: &[u8], aad: &[u8]) -> Result<Vec<u8>, Unavailable> {
        let nonce = mcp_random::bytes::<NONCE_LEN>()?;
        let mut blob = Vec::with_capacity(NONCE_LEN + plaintext.len() + AES_256_GCM.tag_len());
        blob.extend_from_slice(&nonce);
        blob.extend_from_slice(plaintext);
        let tag = self
            .key
            .seal_in_place_separate_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(aad),
                &mut blob[NONCE_LEN..],
            )
            // Only a plaintext beyond AES-GCM's limit (64 GiB) fails here.
            .map_err(|_| Unavailable)?;
        blob.extend_from_slice(tag.as_ref());
        Ok(blob)
    }

    /// The plaintext of `blob` if it was sealed under this key for exactly `aad`; `None`
    /// for anything else (another key, other associated data, changed, too short).
    pub fn open(&self, blob: &[u8], aad: &[u8]) -> Option<Vec<u8>> {
        if blob.len() < NONCE_LEN + AES_256_GCM.tag_len() {
            return None;
        }
        let (nonce, sealed) = blob.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
        let mut data = sealed.to_vec();
        let plain = self
            .key
            .open_in_place(nonce, Aad::from(aad), &mut data)
            .ok()?;
        let len = plain.len();
        data.truncate(len);
        Some(data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blob_opens_only_under_its_key_and_associated_data_and_untouched() {
        let key = AeadKey::new(&derive(&[1; 32], b"test"));
        let blob = key.seal(b"secret", b"row 1").unwrap();
        assert_eq!(blob.len(), 12 + 6 + 16);
        assert!(!blob.windows(6).any(|w| w == b"secret"));
        assert_eq!(key.open(&blob, b"row 1").as_deref(), Some(&b"secret"[..]));
        assert_eq!(key.open(&blob, b"row 2"), None);
        assert_eq!(AeadKey::new(&[2; 32]).open(&blob, b"row 1"), None);
        let mut changed = blob.clone();
        changed[14] ^= 1;
        assert_eq!(key.open(&changed, b"row 1"), None);
        assert_eq!(key.open(&blob[..20], b"row 1"), None);
        assert_ne!(
            blob,
            key.seal(b"secret", b"row 1").unwrap(),
            "a fresh nonce each time"
        );
    }

    #[test]
    fn derivation_is_hkdf_sha256_per_use() {
        // Recorded before this crate: the store's KeyRing::derive_keys and mcp-auth's derive
        // gave this for material [1; 32] and this info.
        assert_eq!(
            mcp_random::hex(&derive(&[1; 32], b"mcp-gateway/test/v1")),
            "2b0c11fd6af631bace8f005cc5bae7a42ae6229986bd4e693ad42e6e89f4a8f1"
        );
        assert_ne!(derive(&[1; 32], b"a"), derive(&[1; 32], b"b"));
    }
}
