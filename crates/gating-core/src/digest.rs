//! `CallDigest`: what a confirmation is bound to, besides caller and tool.

use std::fmt;
use std::str::FromStr;

use ring::digest::{Context, SHA256};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

/// SHA-256 of the canonical JSON of a call's arguments.
///
/// Canonical JSON: object keys sorted (by their UTF-8 bytes) at every depth, no whitespace,
/// strings escaped as `serde_json` escapes them, numbers as `serde_json` prints them. Equal
/// JSON values have equal digests whatever their key order or whitespace on the wire;
/// different values (including `1` and `1.0`, which a tool may treat differently) differ.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CallDigest([u8; 32]);

impl CallDigest {
    /// The digest of `arguments`. A call without arguments is digested as `{}`.
    pub fn of(arguments: &Value) -> Self {
        let mut ctx = Context::new(&SHA256);
        write_canonical(arguments, &mut |bytes| ctx.update(bytes));
        let mut out = [0u8; 32];
        out.copy_from_slice(ctx.finish().as_ref());
        CallDigest(out)
    }

    /// The digest of an optional `arguments` member: absent means `{}`.
    pub fn of_arguments(arguments: Option<&Value>) -> Self {
        match arguments {
            Some(value) => CallDigest::of(value),
            None => CallDigest::of(&Value::Object(serde_json::Map::new())),
        }
    }

    /// Wraps raw digest bytes (for example read back from storage).
    pub const fn from_bytes(bytes: [u8; 32]) -> Self {
        CallDigest(bytes)
    }

    /// The raw digest bytes.
    pub const fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

/// The canonical JSON text of `value`, as digested by [`CallDigest::of`].
pub fn canonical_json(value: &Value) -> String {
    let mut out = Vec::new();
    write_canonical(value, &mut |bytes| out.extend_from_slice(bytes));
    String::from_utf8(out).expect("canonical JSON is built from UTF-8 pieces")
}

fn write_canonical(value: &Value, out: &mut impl FnMut(&[u8])) {
    match value {
        Value::Null => out(b"null"),
        Value::Bool(true) => out(b"true"),
        Value::Bool(false) => out(b"false"),
        Value::Number(n) => out(n.to_string().as_bytes()),
        Value::String(s) => write_string(s, out),
        Value::Array(items) => {
            out(b"[");
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out(b",");
                }
                write_canonical(item, out);
            }
            out(b"]");
        }
        Value::Object(map) => {
            // Sort explicitly: serde_json's map keeps insertion order when any crate in the
            // build enables its `preserve_order` feature.
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            out(b"{");
            for (i, (key, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out(b",");
                }
                write_string(key, out);
                out(b":");
                write_canonical(item, out);
            }
            out(b"}");
        }
    }
}

fn write_string(s: &str, out: &mut impl FnMut(&[u8])) {
    let quoted = serde_json::to_string(s).expect("serialising a string cannot fail");
    out(quoted.as_bytes());
}

impl fmt::Display for CallDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&mcp_random::hex(&self.0))
    }
}

impl fmt::Debug for CallDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CallDigest({self})")
    }
}

/// A string that is not 64 hex digits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a call digest is 64 hex digits")]
pub struct DigestParseError;

impl FromStr for CallDigest {
    type Err = DigestParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.len() != 64 {
            return Err(DigestParseError);
        }
        let mut out = [0u8; 32];
        for (i, pair) in s.as_bytes().chunks_exact(2).enumerate() {
            let pair = std::str::from_utf8(pair).map_err(|_| DigestParseError)?;
            out[i] = u8::from_str_radix(pair, 16).map_err(|_| DigestParseError)?;
        }
        Ok(CallDigest(out))
    }
}

impl Serialize for CallDigest {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for CallDigest {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = String::deserialize(deserializer)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests;
