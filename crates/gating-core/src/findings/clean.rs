//! Short strings this thread has found clean, by the kinds looked for.
//!
//! Nearly every result a module returns has the same keys and short values (`content`,
//! `type`, `text`, `resultType`, `complete`), and each string costs a scan its fixed price
//! (every finder set up and run) though nothing is found in it. Whether a scan finds
//! anything in a text depends on the text and on which kinds are looked for, and on nothing
//! else: a text found clean under a set of kinds is clean under it the next time. So each
//! thread remembers the short texts it found clean, by the set of kinds, and does not scan
//! them again.
//!
//! Only texts of at most [`LONGEST`] bytes are kept, at most [`MOST`] under each set of kinds;
//! a full set is emptied and starts again (a module sending ever new short strings costs the
//! scans it cost before, and no more memory). A text in which something was found is never
//! kept: it is scanned every time.

use std::cell::RefCell;
use std::collections::HashSet;

/// The memo's hasher: foldhash, seeded at random per process and per set, several times
/// cheaper than the standard SipHash on these short texts. It resists a module that
/// chooses colliding texts less than SipHash does, and needs no more here: a set holds at
/// most [`MOST`] texts of at most [`LONGEST`] bytes, so colliding ones cost a bounded
/// number of comparisons, and the memo is never the only thing between a text and its scan.
type Texts = HashSet<Box<str>, foldhash::fast::RandomState>;

/// The longest text kept, in bytes.
pub(super) const LONGEST: usize = 64;
/// The most texts kept under one set of kinds, per thread.
pub(super) const MOST: usize = 512;

thread_local! {
    /// Per set of kinds looked for (a bit per kind), the texts found clean under it.
    static CLEAN: RefCell<Vec<(u8, Texts)>> = const { RefCell::new(Vec::new()) };
}

/// Whether `text` holds nothing of the kinds `kinds` (a bit per kind): remembered where this
/// thread found it clean before under the same kinds, otherwise `scan_finds(text)` is asked
/// and a clean answer for a short text remembered.
pub(super) fn is_clean(kinds: u8, text: &str, scan_finds: impl FnOnce(&str) -> bool) -> bool {
    if text.len() > LONGEST {
        return !scan_finds(text);
    }
    let known = CLEAN.with(|clean| {
        clean
            .borrow()
            .iter()
            .any(|(k, texts)| *k == kinds && texts.contains(text))
    });
    if known {
        return true;
    }
    // Scanned outside the borrow: nothing the scan does may reach this memo, but nothing
    // need rely on that.
    if scan_finds(text) {
        return false;
    }
    CLEAN.with(|clean| {
        let mut clean = clean.borrow_mut();
        let at = match clean.iter().position(|(k, _)| *k == kinds) {
            Some(at) => at,
            None => {
                clean.push((kinds, Texts::default()));
                clean.len() - 1
            }
        };
        let texts = &mut clean[at].1;
        if texts.len() >= MOST {
            texts.clear();
        }
        texts.insert(text.into());
    });
    true
}

#[cfg(test)]
fn kept(kinds: u8) -> usize {
    CLEAN.with(|clean| {
        clean
            .borrow()
            .iter()
            .find(|(k, _)| *k == kinds)
            .map_or(0, |(_, texts)| texts.len())
    })
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    #[test]
    fn a_short_clean_text_is_scanned_once_per_set_of_kinds() {
        let scans = Cell::new(0);
        let scan = |_: &str| {
            scans.set(scans.get() + 1);
            false
        };
        assert!(is_clean(0b01, "content", scan));
        assert!(is_clean(0b01, "content", scan));
        assert_eq!(scans.get(), 1, "remembered");
        assert!(is_clean(0b11, "content", scan));
        assert_eq!(scans.get(), 2, "other kinds, scanned again");
    }

    #[test]
    fn a_text_with_a_finding_or_a_long_one_is_scanned_every_time() {
        let scans = Cell::new(0);
        let finds = |_: &str| {
            scans.set(scans.get() + 1);
            true
        };
        assert!(!is_clean(0b100, "AKIA…", finds));
        assert!(!is_clean(0b100, "AKIA…", finds));
        assert_eq!(scans.get(), 2);
        let long = "x".repeat(LONGEST + 1);
        let clean = |_: &str| {
            scans.set(scans.get() + 1);
            false
        };
        assert!(is_clean(0b100, &long, clean));
        assert!(is_clean(0b100, &long, clean));
        assert_eq!(scans.get(), 4);
        assert_eq!(kept(0b100), 0);
    }

    #[test]
    fn a_full_set_is_emptied_not_grown() {
        for i in 0..MOST + 10 {
            assert!(is_clean(0b1000, &format!("key-{i}"), |_| false));
        }
        assert_eq!(kept(0b1000), 10);
    }

    #[test]
    fn each_thread_keeps_its_own() {
        assert!(is_clean(0b10000, "type", |_| false));
        let elsewhere = std::thread::spawn(|| {
            let scanned = Cell::new(false);
            is_clean(0b10000, "type", |_| {
                scanned.set(true);
                false
            });
            scanned.get()
        })
        .join()
        .unwrap();
        assert!(elsewhere);
    }
}
