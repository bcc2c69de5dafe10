//! Secrets wrapped before they are shown or sent: base64 (standard or URL-safe, padded or
//! not), hex, and percent-encoding, undone one level so the secret rules read what was
//! wrapped. Bounded: at most [`MAX_CANDIDATES`] wrapped runs per string are undone, and only
//! those that decode to text.

use std::sync::LazyLock;

use base64::Engine;
use regex::Regex;

use super::Span;

/// Most runs of one string undone.
const MAX_CANDIDATES: usize = 64;

static BASE64: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"[A-Za-z0-9+/_-]{16,}={0,2}").expect("the base64 pattern compiles")
});
static HEX: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?-u:\b)(?:[0-9a-fA-F]{2}){16,}(?-u:\b)").expect("the hex pattern compiles")
});

/// Each wrapped run of `text` (its span) with what it unwraps to, as text.
pub(super) fn unwrapped(text: &str, out: &mut dyn FnMut(Span, &str)) {
    if text.contains('%')
        && let Some(decoded) = percent_decoded(text)
    {
        out(
            Span {
                start: 0,
                end: text.len(),
            },
            &decoded,
        );
    }
    // Most text has no run long enough to be wrapped: one pass over its bytes says so,
    // before any pattern runs.
    let base64_char = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'_' | b'-');
    if has_run(text, base64_char, 16) {
        base64_runs(text, out);
    }
    if has_run(text, |b| b.is_ascii_hexdigit(), 32) {
        let hex = super::local::local(&HEX);
        for m in hex.find_iter(text).take(MAX_CANDIDATES) {
            if let Some(decoded) = hex_decoded(m.as_str()) {
                out(Span::of(&m), &decoded);
            }
        }
    }
}

/// Whether `text` has `least` bytes in a row that `of` takes.
fn has_run(text: &str, of: impl Fn(u8) -> bool, least: usize) -> bool {
    let mut run = 0;
    for b in text.bytes() {
        if of(b) {
            run += 1;
            if run >= least {
                return true;
            }
        } else {
            run = 0;
        }
    }
    false
}

/// Each base64 run of `text` that decodes to text.
fn base64_runs(text: &str, out: &mut dyn FnMut(Span, &str)) {
    let base64 = super::local::local(&BASE64);
    for m in base64.find_iter(text).take(MAX_CANDIDATES) {
        let run = m.as_str();
        let engines = [
            &base64::engine::general_purpose::STANDARD,
            &base64::engine::general_purpose::STANDARD_NO_PAD,
            &base64::engine::general_purpose::URL_SAFE,
            &base64::engine::general_purpose::URL_SAFE_NO_PAD,
        ];
        if let Some(decoded) = engines
            .iter()
            .find_map(|e| e.decode(run).ok().and_then(|b| String::from_utf8(b).ok()))
        {
            out(Span::of(&m), &decoded);
        }
    }
}

/// `text` with its `%XX` escapes undone, when it has one and the result is text.
fn percent_decoded(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    let mut escaped = false;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let (Some(high), Some(low)) = (
                bytes.get(i + 1).and_then(|b| char::from(*b).to_digit(16)),
                bytes.get(i + 2).and_then(|b| char::from(*b).to_digit(16)),
            )
        {
            out.push(u8::try_from(high * 16 + low).ok()?);
            i += 3;
            escaped = true;
            continue;
        }
        out.push(if bytes[i] == b'+' { b' ' } else { bytes[i] });
        i += 1;
    }
    escaped.then(|| String::from_utf8(out).ok()).flatten()
}

/// Pairs of hex digits as the text they spell, when they do.
fn hex_decoded(run: &str) -> Option<String> {
    let digits: Vec<u32> = run.chars().map(|c| c.to_digit(16)).collect::<Option<_>>()?;
    let bytes: Vec<u8> = digits
        .chunks(2)
        .map(|pair| u8::try_from(pair[0] * 16 + pair.get(1).copied().unwrap_or(0)).ok())
        .collect::<Option<_>>()?;
    String::from_utf8(bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unwrap_all(text: &str) -> Vec<String> {
        let mut out = Vec::new();
        unwrapped(text, &mut |_, decoded| out.push(decoded.to_owned()));
        out
    }

    #[test]
    fn each_wrapping_is_undone_once() {
        let secret = "aws_access_key_id=AKIAQ4WJ3DZQ7XKZN2PR";
        let b64 = base64::engine::general_purpose::STANDARD.encode(secret);
        let url = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(secret);
        let hex = mcp_random::hex(secret.as_bytes());
        let percent = "aws_access_key_id%3DAKIAQ4WJ3DZQ7XKZN2PR%0A";
        for wrapped in [b64.as_str(), url.as_str(), hex.as_str(), percent] {
            let seen = unwrap_all(&format!("data: {wrapped} end"));
            assert!(
                seen.iter().any(|s| s.contains("AKIAQ4WJ3DZQ7XKZN2PR")),
                "{wrapped}: {seen:?}"
            );
        }
        // What decodes to no text is left alone.
        assert!(unwrap_all("blob: /9j/4AAQSkZJRgABAQEASABIAAD/2wBDAP").is_empty());
    }
}
