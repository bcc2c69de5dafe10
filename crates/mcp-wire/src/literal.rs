//! Literals looked for in JSON text on the hot path, each with its searcher built once:
//! `str::contains` sets a two-way searcher up on every call, which in the short texts of a
//! request or a result cost more than the search.

use std::sync::LazyLock;

use memchr::memmem::Finder;

/// A literal and its searcher.
pub(crate) struct Literal(LazyLock<Finder<'static>>);

impl Literal {
    /// The literal's searcher, built on first use (for [`literal!`]).
    pub(crate) const fn new(searcher: fn() -> Finder<'static>) -> Literal {
        Literal(LazyLock::new(searcher))
    }

    /// Whether `text` holds the literal.
    pub(crate) fn is_in(&self, text: &str) -> bool {
        self.0.find(text.as_bytes()).is_some()
    }

    /// Where in `text` the literal starts, each time (not overlapping).
    pub(crate) fn positions<'t>(&'t self, text: &'t str) -> impl Iterator<Item = usize> + 't {
        self.0.find_iter(text.as_bytes())
    }
}

/// A `static` [`Literal`] of this text.
macro_rules! literal {
    ($text:expr) => {
        $crate::literal::Literal::new(|| memchr::memmem::Finder::new($text))
    };
}
pub(crate) use literal;

/// A `\u` escape, which could spell any key or any of its letters.
pub(crate) static ESCAPE: Literal = literal!("\\u");
