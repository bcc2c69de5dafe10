//! Secrets: the rules of gitleaks' default configuration (`rules/gitleaks.toml`, MIT,
//! vendored as data: see `rules/README.md`), read as gitleaks reads them for text that is
//! no file: a rule runs where one of its keywords occurs (any case), its `secretGroup` (or
//! its first group that matched, or the whole match) is the secret, which must reach the
//! rule's Shannon `entropy`, and is dropped when an allowlist says so (its regexes against
//! the secret, the match or the line, its stopwords in the secret; the global allowlist's
//! too). Path conditions mean nothing here: an allowlist that needs a path never applies.
//! Rules that match only paths are left out.

use std::sync::{LazyLock, OnceLock};

use aho_corasick::AhoCorasick;
use regex::Regex;
use serde::Deserialize;

use super::Span;

/// The vendored rule set.
const RULES: &str = include_str!("../../rules/gitleaks.toml");

/// Longest stretch of text one rule's regex is run over at once (gitleaks reads files by
/// fragments too); a secret is never this long.
const FRAGMENT: usize = 64 * 1024;
/// How much consecutive fragments share.
const OVERLAP: usize = 8 * 1024;

#[derive(Deserialize)]
struct File {
    allowlist: Option<AllowlistFile>,
    #[serde(default)]
    rules: Vec<RuleFile>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RuleFile {
    id: String,
    regex: Option<String>,
    #[serde(default)]
    secret_group: Option<usize>,
    entropy: Option<f64>,
    #[serde(default)]
    keywords: Vec<String>,
    #[serde(default)]
    allowlists: Vec<AllowlistFile>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct AllowlistFile {
    #[serde(default)]
    regexes: Vec<String>,
    regex_target: Option<String>,
    #[serde(default)]
    stopwords: Vec<String>,
    #[serde(default)]
    paths: Vec<String>,
    condition: Option<String>,
}

/// What an allowlist's regexes are run against.
#[derive(Clone, Copy)]
enum Target {
    Secret,
    Match,
    Line,
}

struct Allowlist {
    regexes: Vec<Regex>,
    target: Target,
    stopwords: Vec<String>,
}

/// A rule's regex and allowlists, compiled when the rule first runs (most never do for a
/// given text: compiling all of them up front costs seconds in a debug build).
struct Compiled {
    regex: Regex,
    allowlists: Vec<Allowlist>,
}

impl Allowlist {
    /// `None` for one that can never apply here (it needs a path).
    fn of(file: &AllowlistFile) -> Option<Allowlist> {
        let needs_path = !file.paths.is_empty()
            && (file.condition.as_deref() == Some("AND")
                || (file.regexes.is_empty() && file.stopwords.is_empty()));
        if needs_path {
            return None;
        }
        Some(Allowlist {
            regexes: file.regexes.iter().filter_map(|r| go_regex(r)).collect(),
            target: match file.regex_target.as_deref() {
                Some("match") => Target::Match,
                Some("line") => Target::Line,
                _ => Target::Secret,
            },
            stopwords: file.stopwords.iter().map(|s| s.to_lowercase()).collect(),
        })
    }

    fn allows(&self, secret: &str, matched: &str, line: &str) -> bool {
        let target = match self.target {
            Target::Secret => secret,
            Target::Match => matched,
            Target::Line => line,
        };
        if self.regexes.iter().any(|r| r.is_match(target)) {
            return true;
        }
        let lower = secret.to_lowercase();
        self.stopwords.iter().any(|s| lower.contains(s.as_str()))
    }
}

struct Rule {
    id: String,
    regex: String,
    allowlists: Vec<AllowlistFile>,
    compiled: OnceLock<Option<Compiled>>,
    secret_group: Option<usize>,
    entropy: Option<f64>,
    /// Runs whatever the text (it names no keyword).
    always: bool,
}

impl Rule {
    /// Its regex and allowlists (`None`: its regex does not compile, so it never runs).
    fn compiled(&self) -> Option<&Compiled> {
        self.compiled
            .get_or_init(|| {
                Some(Compiled {
                    regex: go_regex(&self.regex)?,
                    allowlists: self.allowlists.iter().filter_map(Allowlist::of).collect(),
                })
            })
            .as_ref()
    }
}

/// The compiled rule set.
pub(super) struct Secrets {
    rules: Vec<Rule>,
    /// Every rule's keywords, any case; pattern `i` belongs to rule `owners[i]`.
    keywords: AhoCorasick,
    owners: Vec<usize>,
    /// The rules that name no keyword (they run on every fragment).
    always: Vec<usize>,
    global: Option<Allowlist>,
}

/// The rule set, compiled once.
pub(super) static SECRETS: LazyLock<Secrets> = LazyLock::new(Secrets::load);

impl Secrets {
    fn load() -> Secrets {
        let file: File = toml::from_str(RULES).unwrap_or_else(|_| File {
            allowlist: None,
            rules: Vec::new(),
        });
        let mut rules = Vec::new();
        let mut words = Vec::new();
        let mut owners = Vec::new();
        for rule in file.rules {
            let Some(regex) = rule.regex else {
                continue;
            };
            let index = rules.len();
            for keyword in &rule.keywords {
                words.push(keyword.to_lowercase());
                owners.push(index);
            }
            rules.push(Rule {
                always: rule.keywords.is_empty(),
                id: rule.id,
                regex,
                allowlists: rule.allowlists,
                compiled: OnceLock::new(),
                secret_group: rule.secret_group,
                entropy: rule.entropy,
            });
        }
        let keywords = AhoCorasick::builder()
            .ascii_case_insensitive(true)
            .kind(Some(aho_corasick::AhoCorasickKind::DFA))
            .build(&words)
            .unwrap_or_else(|_| AhoCorasick::new(Vec::<String>::new()).expect("no patterns"));
        let always = rules
            .iter()
            .enumerate()
            .filter(|(_, rule)| rule.always)
            .map(|(index, _)| index)
            .collect();
        Secrets {
            rules,
            keywords,
            owners,
            always,
            global: file.allowlist.as_ref().and_then(Allowlist::of),
        }
    }

    /// How many rules were read.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.rules.len()
    }

    /// The secrets in `text`: each one's span and rule id.
    pub(super) fn find<'a>(&'a self, text: &str, out: &mut Vec<(Span, &'a str)>) {
        if text.len() <= FRAGMENT {
            self.find_in(text, 0, out);
            return;
        }
        // Fragments that overlap by OVERLAP bytes, each cut at a character's end: a secret
        // shorter than the overlap lies whole in one of them (a longer one, in one line,
        // may be missed); what two fragments both found is kept once.
        let mut start = 0;
        loop {
            let mut end = (start + FRAGMENT).min(text.len());
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            self.find_in(&text[start..end], start, out);
            if end == text.len() {
                break;
            }
            let mut next = end - OVERLAP;
            while !text.is_char_boundary(next) {
                next -= 1;
            }
            start = next;
        }
        out.sort_by_key(|(span, _)| (span.start, span.end));
        out.dedup_by_key(|(span, _)| (span.start, span.end));
    }

    fn find_in<'a>(&'a self, fragment: &str, offset: usize, out: &mut Vec<(Span, &'a str)>) {
        // The rules a keyword of which the fragment holds, and those that always run, in
        // the rules' order; most fragments hold none, and then nothing more runs (nor is
        // allocated).
        let mut run: Vec<usize> = self
            .keywords
            .find_overlapping_iter(fragment)
            .map(|found| self.owners[found.pattern().as_usize()])
            .chain(self.always.iter().copied())
            .collect();
        if run.is_empty() {
            return;
        }
        run.sort_unstable();
        run.dedup();
        for rule in run.into_iter().filter_map(|index| self.rules.get(index)) {
            let Some(compiled) = rule.compiled() else {
                continue;
            };
            // Found by the fast engine; the groups read only where it found one.
            for found in compiled.regex.find_iter(fragment) {
                let Some(captures) = compiled.regex.captures_at(fragment, found.start()) else {
                    continue;
                };
                let Some(whole) = captures.get(0) else {
                    continue;
                };
                let secret = match rule.secret_group {
                    Some(group) => captures.get(group),
                    None => captures.iter().skip(1).flatten().find(|m| !m.is_empty()),
                }
                .unwrap_or(whole);
                if rule
                    .entropy
                    .is_some_and(|least| entropy(secret.as_str()) < least)
                {
                    continue;
                }
                let line = line_of(fragment, whole.start(), whole.end());
                let allowed = |a: &Allowlist| a.allows(secret.as_str(), whole.as_str(), line);
                if compiled.allowlists.iter().any(allowed)
                    || self.global.as_ref().is_some_and(allowed)
                {
                    continue;
                }
                out.push((
                    Span {
                        start: offset + secret.start(),
                        end: offset + secret.end(),
                    },
                    rule.id.as_str(),
                ));
            }
        }
    }
}

/// A rule's regex with Go's meaning: `\w`, `\d`, `\s` and `\b` are ASCII there (and
/// Unicode ones are also far larger compiled: gitleaks' generic rule passes the default
/// size limit). A pattern that could then match bytes that are no text (a bare `.`) keeps
/// Unicode classes, under a larger limit.
fn go_regex(pattern: &str) -> Option<Regex> {
    Regex::new(&format!("(?-u){pattern}")).ok().or_else(|| {
        regex::RegexBuilder::new(pattern)
            .size_limit(64 * 1024 * 1024)
            .build()
            .ok()
    })
}

/// The line (or lines) around `start..end`.
fn line_of(text: &str, start: usize, end: usize) -> &str {
    let from = text[..start].rfind('\n').map_or(0, |i| i + 1);
    let to = text[end..].find('\n').map_or(text.len(), |i| end + i);
    &text[from..to]
}

/// Shannon entropy of `text`'s bytes, in bits per byte.
fn entropy(text: &str) -> f64 {
    let mut counts = [0u32; 256];
    for b in text.bytes() {
        counts[usize::from(b)] += 1;
    }
    let len = f64::from(u32::try_from(text.len()).unwrap_or(u32::MAX));
    counts
        .iter()
        .filter(|c| **c > 0)
        .map(|c| {
            let p = f64::from(*c) / len;
            -p * p.log2()
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(text: &str) -> Vec<(String, String)> {
        let mut out = Vec::new();
        SECRETS.find(text, &mut out);
        out.into_iter()
            .map(|(span, rule)| (text[span.start..span.end].to_owned(), rule.to_owned()))
            .collect()
    }

    #[test]
    fn the_rule_set_is_read_whole() {
        // Every rule of the vendored file with a regex compiles (221 of its 222; the other
        // matches only paths).
        assert!(SECRETS.len() >= 200, "{} rules", SECRETS.len());
        for rule in &SECRETS.rules {
            assert!(rule.compiled().is_some(), "{} compiles", rule.id);
        }
        assert_eq!(entropy("aaaa"), 0.0);
        assert!((entropy("ab") - 1.0).abs() < 1e-9);
    }

    // Independent vectors: made up here in each format's published shape, not taken from
    // the rule set's own tests.
    #[test]
    fn well_known_tokens_and_keys_are_found() {
        for (text, rule) in [
            (
                "aws_access_key_id = AKIAQ4WJ3DZQ7XKZN2PR",
                "aws-access-token",
            ),
            (
                "token: ghp_Zq8wE3rT5yU7iO9pA1sD3fG5hJ7kL9zX1cV3",
                "github-pat",
            ),
            (
                "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAq7BFUHOXYu3gX1zB7rq9mQ2vJ5cKx8LwP0s3dE6fG7hI9jK1lM2nO3pQ4rS5tU6vW7xY8zA9bC0dE1fG2hI3jK4lM5nO6pQ7rS8tU9vW0xY1zA2bC3dE4fG5hI6jK7lM8nO9pQ0rS1tU2vW3xY4zA5bC6dE7fG8hI9jK0lM1nO2pQ3rS4t\n-----END RSA PRIVATE KEY-----",
                "private-key",
            ),
            (
                "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhbGljZSIsImlhdCI6MTcwMDAwMDAwMH0.c2lnbmF0dXJlLW9mLXRoZS10b2tlbi1oZXJl",
                "jwt",
            ),
            (
                "SLACK=xoxb-1234567890123-1234567890123-Zq8wE3rT5yU7iO9pA1sD3fG5",
                "slack-bot-token",
            ),
        ] {
            let seen = found(text);
            assert!(
                seen.iter().any(|(_, r)| r == rule),
                "{rule} in {text:?}: {seen:?}"
            );
        }
    }

    #[test]
    fn look_alikes_are_not_secrets() {
        for text in [
            // The documentation's example key is allowed by the rule set itself.
            "aws_access_key_id = AKIAIOSFODNN7EXAMPLE",
            // A base64 blob that is no key, and words about keys.
            "thumbnail: aGVsbG8gd29ybGQgaGVsbG8gd29ybGQ=",
            "the api key rotation runs every night; set key_length = 32",
            "order 4111111111111111 shipped",
        ] {
            assert_eq!(found(text), Vec::<(String, String)>::new(), "{text:?}");
        }
    }

    #[test]
    fn a_long_text_of_any_script_is_read_in_fragments_without_a_panic_or_a_lost_secret() {
        // Multi-byte characters across every fragment boundary.
        let text = "日本語".repeat(30_000);
        assert!(found(&text).is_empty());
        // A key straddling where the first fragment ends, on no line of its own.
        let before = "x".repeat(FRAGMENT - 20);
        let text = format!("{before} aws_access_key_id=AKIAQ4WJ3DZQ7XKZN2PR {before}");
        let seen = found(&text);
        assert_eq!(seen.len(), 1, "{seen:?}");
        assert_eq!(seen[0].0, "AKIAQ4WJ3DZQ7XKZN2PR");
    }

    #[test]
    fn a_long_text_is_read_in_fragments_without_losing_a_secret() {
        let filler = "lorem ipsum dolor sit amet\n".repeat(5000);
        let text = format!("{filler}aws_access_key_id = AKIAQ4WJ3DZQ7XKZN2PR\n{filler}");
        let seen = found(&text);
        assert!(
            seen.iter()
                .any(|(s, r)| r == "aws-access-token" && s == "AKIAQ4WJ3DZQ7XKZN2PR"),
            "{seen:?}"
        );
    }
}
