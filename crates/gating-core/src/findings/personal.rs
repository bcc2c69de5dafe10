//! Personal data: email addresses, phone numbers (international or with separators),
//! payment card numbers (a known issuer's prefix and length, and the Luhn check) and IBANs
//! (a country's length and the mod-97 check). Each pattern is delimited, so a number
//! inside a longer word or id (`ORD4111111111111111`) is not one.

use std::sync::LazyLock;

use regex::Regex;

use super::{FindingKind, Span};

pub(super) static EMAIL: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\b[a-z0-9._%+-]{1,64}@[a-z0-9-]{1,63}(?:\.[a-z0-9-]{1,63})*\.[a-z]{2,24}\b")
        .expect("the email pattern compiles")
});
static PHONE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?:^|[^\w+])(\+[1-9][0-9]{0,2}[ .-]?(?:\([0-9]{1,4}\)[ .-]?)?[0-9]{1,4}(?:[ .-]?[0-9]{2,4}){2,4}|\([0-9]{2,4}\)[ .-]?[0-9]{3,4}[ .-][0-9]{3,4})\b")
        .expect("the phone pattern compiles")
});
static CARD: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?:^|[^\w-])([0-9](?:[ -]?[0-9]){12,18})\b").expect("the card pattern compiles")
});
static IBAN: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"\b([A-Z]{2}[0-9]{2}(?: ?[A-Z0-9]){11,30})\b").expect("the IBAN pattern compiles")
});

/// The personal data in `text` of the kinds `wanted` says are looked for.
pub(super) fn find(
    text: &str,
    wanted: impl Fn(FindingKind) -> bool,
    out: &mut Vec<(Span, FindingKind)>,
) {
    if wanted(FindingKind::Email)
        && let Some(email) = super::local::local_for(&EMAIL, text)
    {
        for m in email.find_iter(text) {
            out.push((Span::of(&m), FindingKind::Email));
        }
    }
    if wanted(FindingKind::Card) {
        for m in group_one(super::local::local_for(&CARD, text), text) {
            if is_card(m.as_str()) {
                out.push((Span::of(&m), FindingKind::Card));
            }
        }
    }
    if wanted(FindingKind::Phone) {
        for m in group_one(super::local::local_for(&PHONE, text), text) {
            let digits = m.as_str().chars().filter(char::is_ascii_digit).count();
            if (8..=15).contains(&digits) {
                out.push((Span::of(&m), FindingKind::Phone));
            }
        }
    }
    if wanted(FindingKind::Iban) {
        for m in group_one(super::local::local_for(&IBAN, text), text) {
            if is_iban(m.as_str()) {
                out.push((Span::of(&m), FindingKind::Iban));
            }
        }
    }
}

/// Each match's first group: found by the fast engine, the group read only where it found
/// one (none where the text is too short for a match: `regex` is `None`).
fn group_one(
    regex: Option<std::rc::Rc<Regex>>,
    text: &str,
) -> impl Iterator<Item = regex::Match<'_>> + '_ {
    regex.into_iter().flat_map(move |regex| {
        regex
            .find_iter(text)
            .filter_map(|found| {
                regex
                    .captures_at(text, found.start())
                    .and_then(|c| c.get(1))
            })
            .collect::<Vec<_>>()
    })
}

/// A payment card number: a known issuer's prefix and length, and the Luhn check.
fn is_card(text: &str) -> bool {
    let digits: Vec<u32> = text.chars().filter_map(|c| c.to_digit(10)).collect();
    let len = digits.len();
    let prefix = |n: usize| digits.iter().take(n).fold(0, |a, d| a * 10 + d);
    let issuer = match digits.first() {
        Some(4) => matches!(len, 13 | 16 | 19),
        Some(5) => (51..=55).contains(&prefix(2)) && len == 16,
        Some(2) => (2221..=2720).contains(&prefix(4)) && len == 16,
        Some(3) => {
            matches!(prefix(2), 34 | 37) && len == 15
                || (3528..=3589).contains(&prefix(4)) && len == 16
        }
        Some(6) => (prefix(4) == 6011 || prefix(2) == 65) && matches!(len, 16 | 19),
        _ => false,
    };
    issuer && luhn(&digits)
}

fn luhn(digits: &[u32]) -> bool {
    let sum: u32 = digits
        .iter()
        .rev()
        .enumerate()
        .map(|(i, d)| {
            if i % 2 == 1 {
                let doubled = d * 2;
                if doubled > 9 { doubled - 9 } else { doubled }
            } else {
                *d
            }
        })
        .sum();
    sum.is_multiple_of(10)
}

/// The lengths of IBANs by country (the registry's, for the countries most seen).
const IBAN_LENGTHS: [(&str, usize); 40] = [
    ("AD", 24),
    ("AT", 20),
    ("BE", 16),
    ("BG", 22),
    ("CH", 21),
    ("CY", 28),
    ("CZ", 24),
    ("DE", 22),
    ("DK", 18),
    ("EE", 20),
    ("ES", 24),
    ("FI", 18),
    ("FR", 27),
    ("GB", 22),
    ("GR", 27),
    ("HR", 21),
    ("HU", 28),
    ("IE", 22),
    ("IS", 26),
    ("IT", 27),
    ("LI", 21),
    ("LT", 20),
    ("LU", 20),
    ("LV", 21),
    ("MC", 27),
    ("MT", 31),
    ("NL", 18),
    ("NO", 15),
    ("PL", 28),
    ("PT", 25),
    ("RO", 24),
    ("SE", 24),
    ("SI", 19),
    ("SK", 24),
    ("SM", 27),
    ("TR", 26),
    ("UA", 29),
    ("AE", 23),
    ("SA", 24),
    ("IL", 23),
];

/// An IBAN: its country's length and the mod-97 check.
fn is_iban(text: &str) -> bool {
    let compact: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    if !compact.is_ascii() {
        return false;
    }
    let Some(len) = IBAN_LENGTHS
        .iter()
        .find(|(country, _)| compact.starts_with(country))
        .map(|(_, len)| *len)
    else {
        return false;
    };
    if compact.len() != len {
        return false;
    }
    let (head, tail) = compact.split_at(4);
    let mut remainder: u32 = 0;
    for c in tail.chars().chain(head.chars()) {
        let value = match c.to_digit(36) {
            Some(v) => v,
            None => return false,
        };
        let width = if value < 10 { 10 } else { 100 };
        remainder = (remainder * width + value) % 97;
    }
    remainder == 1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(text: &str) -> Vec<(String, FindingKind)> {
        let mut out = Vec::new();
        find(text, |_| true, &mut out);
        out.into_iter()
            .map(|(s, k)| (text[s.start..s.end].to_owned(), k))
            .collect()
    }

    #[test]
    fn cards_need_an_issuer_the_luhn_check_and_delimiters() {
        // Published test numbers of the card networks.
        for card in [
            "4111 1111 1111 1111",
            "5555-5555-5555-4444",
            "378282246310005",
            "6011111111111117",
        ] {
            assert_eq!(
                kinds(&format!("card: {card}.")),
                vec![(card.to_owned(), FindingKind::Card)],
                "{card}"
            );
        }
        // One digit off fails Luhn; an order id that holds a Luhn-valid number is an id.
        assert!(kinds("card: 4111 1111 1111 1112").is_empty());
        assert!(kinds("order ORD4111111111111111 shipped").is_empty());
        assert!(kinds("order ORD-4111111111111111-B shipped").is_empty());
        assert!(
            kinds("ticket 1234567890123452").is_empty(),
            "no issuer starts with 1"
        );
    }

    #[test]
    fn ibans_need_their_countrys_length_and_the_checksum() {
        for iban in [
            "DE89 3704 0044 0532 0130 00",
            "GB82WEST12345698765432",
            "FR1420041010050500013M02606",
        ] {
            assert_eq!(
                kinds(&format!("pay to {iban} please")),
                vec![(iban.to_owned(), FindingKind::Iban)],
                "{iban}"
            );
        }
        assert!(
            kinds("pay to DE89 3704 0044 0532 0130 01").is_empty(),
            "checksum"
        );
        assert!(kinds("SKU DE12ABCDEFGHIJKLMNOP").is_empty());
        // Digits of other scripts are not an IBAN's (nor a reason to fail).
        assert!(kinds("DE\u{ff11}\u{ff12}ABCDEFGHIJKLMN").is_empty());
    }

    #[test]
    fn emails_and_phone_numbers_are_found_and_versions_are_not_phones() {
        assert_eq!(
            kinds("write to ana.perez+bills@example.co.uk today"),
            vec![(
                "ana.perez+bills@example.co.uk".to_owned(),
                FindingKind::Email
            )]
        );
        assert_eq!(
            kinds("call +44 20 7946 0958 now"),
            vec![("+44 20 7946 0958".to_owned(), FindingKind::Phone)]
        );
        assert_eq!(
            kinds("call (212) 555-0147"),
            vec![("(212) 555-0147".to_owned(), FindingKind::Phone)]
        );
        for text in [
            "version 1.22.3-4",
            "at 2026-12-05 10:00",
            "id 12345678",
            "user@localhost",
        ] {
            assert!(kinds(text).is_empty(), "{text}: {:?}", kinds(text));
        }
    }
}
