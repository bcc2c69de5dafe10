//! Random tokens and ids, and hex: the one way the gateway makes them.
//!
//! Every secret and every id comes from the operating system's source ([`bytes`]). When
//! that source fails, the caller gets [`Unavailable`], never zeros: an id or a token that
//! is all zeros is the same on every instance and every run, so a failure would turn into
//! collisions or guessable secrets. Where nothing sensible can go on without one (a name
//! made once at start-up), [`bytes_or_abort`] stops the process instead.
//!
//! # Example
//!
//! ```
//! let token = mcp_random::hex_token::<32>()?; // 256 random bits, as 64 hex digits
//! assert_eq!(token.len(), 64);
//! assert_eq!(mcp_random::hex(&[0xca, 0xfe]), "cafe");
//! # Ok::<(), mcp_random::Unavailable>(())
//! ```

use ring::rand::{SecureRandom, SystemRandom};

/// The operating system's random source failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the system's random source failed")]
pub struct Unavailable;

/// `N` random bytes from the operating system.
pub fn bytes<const N: usize>() -> Result<[u8; N], Unavailable> {
    let mut out = [0u8; N];
    SystemRandom::new()
        .fill(&mut out)
        .map_err(|_| Unavailable)?;
    Ok(out)
}

/// `N` random bytes as `2 * N` lowercase hex digits.
pub fn hex_token<const N: usize>() -> Result<String, Unavailable> {
    Ok(hex(&bytes::<N>()?))
}

/// `N` random bytes, or the process ends: for what is made once at start-up and without
/// which nothing can be served (there is no caller to tell).
pub fn bytes_or_abort<const N: usize>() -> [u8; N] {
    match bytes::<N>() {
        Ok(bytes) => bytes,
        Err(e) => {
            eprintln!(
                "mcp-gateway: {e}; stopping (a random value is needed and zeros would be guessable)"
            );
            std::process::abort()
        }
    }
}

/// `bytes` as lowercase hex, two digits a byte.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_is_two_lowercase_digits_a_byte() {
        assert_eq!(hex(&[0x00, 0x0f, 0xa5, 0xff]), "000fa5ff");
        assert_eq!(hex(&[]), "");
    }

    #[test]
    fn tokens_are_random_and_of_their_length() {
        let a = hex_token::<16>().unwrap();
        let b = hex_token::<16>().unwrap();
        assert_eq!(a.len(), 32);
        assert_ne!(a, b);
        assert_ne!(bytes::<32>().unwrap(), [0u8; 32]);
    }
}
