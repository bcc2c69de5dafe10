//! The SHA-256 digests of the bearer tokens this thread has seen name a grant, found again
//! by a keyed hash of each token.
//!
//! Mode `tokens` finds a token's grant by the token's SHA-256, and SHA-256 was the dearest
//! step of authenticating a request (about 2,500 instructions for a token of a few dozen
//! bytes: 2 % of a forwarded call). A token's digest never changes, so each worker thread
//! keeps the digests of the tokens that named a grant, found by SipHash-2-4 with a 128-bit
//! output (about a fifth of the cost) under a key drawn from the operating system on first
//! use: without the key no one can make two tokens meet, and no key, no memo (every token
//! is digested, as before). What a digest names is read from the grants every time, so a
//! reload that revokes a token revokes it here too.
//!
//! At most [`KEPT`] tokens per thread, emptied when full. A token that names no grant is
//! never kept: a stream of made-up tokens costs a digest each, as it did.

use std::cell::RefCell;
use std::hash::Hasher as _;
use std::sync::LazyLock;

use ring::digest::{SHA256, digest};
use siphasher::sip128::{Hash128, Hasher128, SipHasher24};

/// The most tokens one thread keeps.
pub(crate) const KEPT: usize = 64;

/// The process's key for the memo (`None`: the random source failed; nothing is kept).
static KEY: LazyLock<Option<[u8; 16]>> = LazyLock::new(|| mcp_random::bytes::<16>().ok());

thread_local! {
    /// The keyed hash and the digest of each token kept.
    static KEPT_HERE: RefCell<Vec<(Hash128, [u8; 32])>> = const { RefCell::new(Vec::new()) };
}

/// The SHA-256 of `token`: as kept on this thread, or computed, and then kept where
/// `names_grant` says it names one.
pub(crate) fn sha256(token: &str, names_grant: impl FnOnce(&[u8; 32]) -> bool) -> [u8; 32] {
    let Some(key) = KEY.as_ref() else {
        return computed(token);
    };
    let mut hasher = SipHasher24::new_with_key(key);
    hasher.write(token.as_bytes());
    let keyed = hasher.finish128();
    let kept = KEPT_HERE.with(|kept| {
        kept.borrow()
            .iter()
            .find(|(hash, _)| *hash == keyed)
            .map(|(_, digest)| *digest)
    });
    if let Some(digest) = kept {
        return digest;
    }
    let digest = computed(token);
    if names_grant(&digest) {
        KEPT_HERE.with(|kept| {
            let mut kept = kept.borrow_mut();
            if kept.len() >= KEPT {
                kept.clear();
            }
            kept.push((keyed, digest));
        });
    }
    digest
}

fn computed(token: &str) -> [u8; 32] {
    let mut out = [0u8; 32];
    out.copy_from_slice(digest(&SHA256, token.as_bytes()).as_ref());
    out
}

#[cfg(test)]
fn kept_here() -> usize {
    KEPT_HERE.with(|kept| kept.borrow().len())
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    #[test]
    fn a_tokens_digest_is_its_sha256_kept_or_not() {
        for token in ["s3cret", "s3cret", "other", "", "s3cret"] {
            assert_eq!(sha256(token, |_| true), computed(token));
        }
        assert_eq!(
            crate::token_sha256("s3cret"),
            mcp_random::hex(&sha256("s3cret", |_| true))
        );
    }

    /// On a thread of its own: what it counts starts empty.
    fn on_a_fresh_thread(test: impl FnOnce() + Send + 'static) {
        std::thread::spawn(test).join().unwrap();
    }

    #[test]
    fn only_a_token_naming_a_grant_is_kept_and_a_kept_one_is_not_digested_again() {
        on_a_fresh_thread(only_naming_tokens_are_kept);
    }

    fn only_naming_tokens_are_kept() {
        let asked = Cell::new(0);
        let names = |_: &[u8; 32]| {
            asked.set(asked.get() + 1);
            true
        };
        let refused = |_: &[u8; 32]| false;
        sha256("made-up", refused);
        sha256("made-up", refused);
        assert_eq!(kept_here(), 0, "a token naming nothing is not kept");
        sha256("agent-token", names);
        sha256("agent-token", names);
        assert_eq!(asked.get(), 1, "kept: found again without a digest");
        assert_eq!(kept_here(), 1);
    }

    #[test]
    fn a_thread_keeps_at_most_so_many() {
        on_a_fresh_thread(|| {
            for i in 0..KEPT + 3 {
                sha256(&format!("token-{i}"), |_| true);
            }
            assert_eq!(kept_here(), 3, "emptied when full");
        });
    }
}
