//! This thread's own copy of a pattern every call runs.
//!
//! A `regex::Regex` searched from many threads at once hands each search its scratch space
//! from one pool: the first thread to use it takes its own without a lock, every other one
//! takes the pool's mutex. The scan runs its patterns on every string of every result, from
//! every worker thread, so that mutex is what all cores meet on each call. A clone of a
//! `Regex` shares the compiled program and has a pool of its own: each thread keeps a clone
//! of each pattern (a handful, made once per thread) and never takes a lock to search.
//!
//! Most strings of a result are short (keys, types, ids): each pattern's shortest match is
//! read from its syntax once, and a string shorter than that is not searched at all.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::LazyLock;

use regex::Regex;

thread_local! {
    /// This thread's clones, by the address of the pattern they are of, with the length of
    /// the shortest text each can match.
    static CLONES: RefCell<Vec<(usize, Rc<Regex>, usize)>> = const { RefCell::new(Vec::new()) };
}

/// This thread's copy of `pattern` (made on first use here).
pub(super) fn local(pattern: &'static LazyLock<Regex>) -> Rc<Regex> {
    copy(pattern).0
}

/// This thread's copy of `pattern`, unless `text` is too short for any match of it.
pub(super) fn local_for(pattern: &'static LazyLock<Regex>, text: &str) -> Option<Rc<Regex>> {
    let (regex, shortest) = copy(pattern);
    (text.len() >= shortest).then_some(regex)
}

fn copy(pattern: &'static LazyLock<Regex>) -> (Rc<Regex>, usize) {
    let key = std::ptr::from_ref(pattern) as usize;
    CLONES.with(|clones| {
        let mut clones = clones.borrow_mut();
        if let Some((_, regex, shortest)) = clones.iter().find(|(k, _, _)| *k == key) {
            return (regex.clone(), *shortest);
        }
        let regex = Rc::new(Regex::clone(pattern));
        let shortest = shortest_match(regex.as_str());
        clones.push((key, regex.clone(), shortest));
        (regex, shortest)
    })
}

/// The fewest bytes a match of `pattern` can have (0 where its syntax cannot be read, so
/// nothing is skipped).
fn shortest_match(pattern: &str) -> usize {
    regex_syntax::Parser::new()
        .parse(pattern)
        .ok()
        .and_then(|hir| hir.properties().minimum_len())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    static DIGITS: LazyLock<Regex> = LazyLock::new(|| Regex::new("[0-9]+").unwrap());
    static WORDS: LazyLock<Regex> = LazyLock::new(|| Regex::new("[a-z]+").unwrap());

    #[test]
    fn a_text_shorter_than_any_match_is_not_searched() {
        static FOUR: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"(?i)\bab[0-9]{2}\b").unwrap());
        assert_eq!(shortest_match(FOUR.as_str()), 4);
        assert!(local_for(&FOUR, "ab1").is_none());
        assert_eq!(
            local_for(&FOUR, "AB12")
                .unwrap()
                .find("AB12")
                .map(|m| m.as_str()),
            Some("AB12")
        );
        // Every pattern the scan runs: whatever it matches is at least its shortest match,
        // on samples of each kind.
        for (pattern, sample) in [
            (&super::super::hidden::INJECTION, "[INST]"),
            (&super::super::personal::EMAIL, "a@b.io"),
        ] {
            let shortest = shortest_match(pattern.as_str());
            let found = pattern.find(sample).unwrap();
            assert!(
                found.len() >= shortest && shortest > 0,
                "{sample}: {shortest}"
            );
        }
    }

    #[test]
    fn each_thread_has_one_copy_of_each_pattern_that_finds_what_the_pattern_finds() {
        let (a, b) = (local(&DIGITS), local(&DIGITS));
        assert!(Rc::ptr_eq(&a, &b), "one copy per thread");
        assert!(!Rc::ptr_eq(&a, &local(&WORDS)), "one per pattern");
        assert_eq!(a.find("ab 123").map(|m| m.as_str()), Some("123"));
        let there = std::thread::spawn(|| {
            let copy = local(&DIGITS);
            (copy.find("x9").map(|m| m.start()), Rc::strong_count(&copy))
        })
        .join()
        .unwrap();
        assert_eq!(there, (Some(1), 2), "another thread makes its own");
    }
}
