//! Literals looked for in JSON text on the hot path, each with its searcher built once:
//! `str::contains` sets a two-way searcher up on every call, which in the short texts of a
//! request or a result cost more than the search.

use std::sync::LazyLock;

use memchr::memmem::Finder;

/// A literal and its searcher.
pub(crate) struct Literal(pub(crate) LazyLock<Finder<'static>>);

impl Literal {
    /// Whether `text` holds the literal.
    pub(crate) fn is_in(&self, text: &str) -> bool {
        self.0.find(text.as_bytes()).is_some()
    }
}

/// A `static` [`Literal`] of this text.
macro_rules! literal {
    ($text:expr) => {
        $crate::literal::Literal(std::sync::LazyLock::new(|| {
            memchr::memmem::Finder::new($text)
        }))
    };
}
pub(crate) use literal;

/// A `\u` escape, which could spell any key or any of its letters.
pub(crate) static ESCAPE: Literal = literal!("\\u");
