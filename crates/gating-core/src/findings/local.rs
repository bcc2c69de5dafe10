//! This thread's own copy of a pattern every call runs.
//!
//! A `regex::Regex` searched from many threads at once hands each search its scratch space
//! from one pool: the first thread to use it takes its own without a lock, every other one
//! takes the pool's mutex. The scan runs its patterns on every string of every result, from
//! every worker thread, so that mutex is what all cores meet on each call. A clone of a
//! `Regex` shares the compiled program and has a pool of its own: each thread keeps a clone
//! of each pattern (a handful, made once per thread) and never takes a lock to search.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::LazyLock;

use regex::Regex;

thread_local! {
    /// This thread's clones, by the address of the pattern they are of.
    static CLONES: RefCell<Vec<(usize, Rc<Regex>)>> = const { RefCell::new(Vec::new()) };
}

/// This thread's copy of `pattern` (made on first use here).
pub(super) fn local(pattern: &'static LazyLock<Regex>) -> Rc<Regex> {
    let key = std::ptr::from_ref(pattern) as usize;
    CLONES.with(|clones| {
        let mut clones = clones.borrow_mut();
        if let Some((_, regex)) = clones.iter().find(|(k, _)| *k == key) {
            return regex.clone();
        }
        let regex = Rc::new(Regex::clone(pattern));
        clones.push((key, regex.clone()));
        regex
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    static DIGITS: LazyLock<Regex> = LazyLock::new(|| Regex::new("[0-9]+").unwrap());
    static WORDS: LazyLock<Regex> = LazyLock::new(|| Regex::new("[a-z]+").unwrap());

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
