//! How sizes, durations and secrets are read and written: `"64MiB"`, `"30s"`, redacted.

/// A number with an optional unit, as `"30s"` or `"64MiB"`, or a bare number (the unit
/// that `units` lists first with factor 1 is implied).
pub(super) mod quantity {
    use serde::{Deserialize, Deserializer, de::Error};

    /// `n` in the largest unit that divides it (`0` and odd amounts in the smallest).
    pub(crate) fn format(n: u64, units: &[(&str, u64)]) -> String {
        units
            .iter()
            .rev()
            .find(|(_, factor)| n > 0 && n.is_multiple_of(*factor))
            .map_or_else(
                || format!("{n}{}", units.first().map_or("", |(u, _)| *u)),
                |(unit, factor)| format!("{}{unit}", n / factor),
            )
    }

    /// Parses `text` against `units` (suffix, factor); `example` is named in errors.
    pub(crate) fn parse(text: &str, units: &[(&str, u64)], example: &str) -> Result<u64, String> {
        let text = text.trim();
        let (number, unit) = text.split_at(
            text.find(|c: char| !c.is_ascii_digit())
                .unwrap_or(text.len()),
        );
        let n: u64 = number
            .parse()
            .map_err(|_| format!("{text:?} is not a value like {example}"))?;
        let unit = unit.trim();
        let factor = match units.iter().find(|(suffix, _)| *suffix == unit) {
            Some((_, factor)) => *factor,
            None if unit.is_empty() => 1,
            None => {
                let names: Vec<&str> = units.iter().map(|(s, _)| *s).collect();
                return Err(format!(
                    "{text:?}: the unit must be one of {}",
                    names.join(", ")
                ));
            }
        };
        Ok(n.saturating_mul(factor))
    }

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Number(u64),
        Text(String),
    }

    /// A TOML integer as is, or a string through [`parse`].
    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
        units: &[(&str, u64)],
        example: &str,
    ) -> Result<u64, D::Error> {
        match Raw::deserialize(d)? {
            Raw::Number(n) => Ok(n),
            Raw::Text(text) => parse(&text, units, example).map_err(D::Error::custom),
        }
    }
}

/// Sizes as a number of bytes or `"512KiB"`, `"64MiB"`, `"1GiB"`.
pub(super) mod bytes {
    use serde::Deserializer;

    const UNITS: [(&str, u64); 4] = [
        ("B", 1),
        ("KiB", 1 << 10),
        ("MiB", 1 << 20),
        ("GiB", 1 << 30),
    ];
    const EXAMPLE: &str = "\"64MiB\"";

    #[cfg(test)]
    pub(crate) fn parse(text: &str) -> Result<usize, String> {
        super::quantity::parse(text, &UNITS, EXAMPLE).map(saturate)
    }

    pub(crate) fn saturate(n: u64) -> usize {
        usize::try_from(n).unwrap_or(usize::MAX)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
        super::quantity::deserialize(d, &UNITS, EXAMPLE).map(saturate)
    }

    pub(crate) fn serialize<S: serde::Serializer>(n: &usize, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::quantity::format(*n as u64, &UNITS))
    }

    pub(crate) mod option {
        use serde::Deserializer;

        pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
            d: D,
        ) -> Result<Option<usize>, D::Error> {
            super::deserialize(d).map(Some)
        }

        pub(crate) fn serialize<S: serde::Serializer>(
            n: &Option<usize>,
            s: S,
        ) -> Result<S::Ok, S::Error> {
            match n {
                Some(n) => super::serialize(n, s),
                None => s.serialize_none(),
            }
        }
    }
}

/// Secrets in the effective configuration `check-config` prints.
pub(super) mod redact {
    use std::collections::BTreeMap;

    use serde::Serializer;

    const HIDDEN: &str = "<redacted>";

    /// A URL without its password (`postgres://user:<redacted>@host/db`).
    pub(crate) fn url<S: Serializer>(url: &Option<String>, s: S) -> Result<S::Ok, S::Error> {
        match url {
            None => s.serialize_none(),
            Some(url) => {
                let shown = match (url.find("://"), url.rfind('@')) {
                    (Some(scheme), Some(at)) if at > scheme => {
                        let userinfo = &url[scheme + 3..at];
                        match userinfo.split_once(':') {
                            Some((user, _)) => {
                                format!("{}{user}:{HIDDEN}{}", &url[..scheme + 3], &url[at..])
                            }
                            None => url.clone(),
                        }
                    }
                    _ => url.clone(),
                };
                // A password may also be a query parameter.
                let shown = match shown.split_once("password=") {
                    Some((before, _)) => format!("{before}password={HIDDEN}"),
                    None => shown,
                };
                s.serialize_some(&shown)
            }
        }
    }

    /// Seal keys by id only.
    pub(crate) fn keys<S: Serializer>(keys: &[String], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(keys.iter().map(|k| match k.split_once(':') {
            Some((id, _)) => format!("{id}:{HIDDEN}"),
            None => HIDDEN.to_owned(),
        }))
    }

    /// Names kept, values hidden (module environments and headers).
    pub(crate) fn values<S: Serializer>(
        map: &BTreeMap<String, String>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.collect_map(map.keys().map(|k| (k, HIDDEN)))
    }
}

/// Durations as `"30s"`, `"10m"`, `"2h"` or a number of seconds.
pub(crate) mod duration {
    use std::time::Duration;

    use serde::Deserializer;

    const UNITS: [(&str, u64); 4] = [("s", 1), ("m", 60), ("h", 3600), ("d", 86_400)];
    const EXAMPLE: &str = "\"30s\", \"10m\", \"2h\" or \"30d\"";

    #[cfg(test)]
    pub(crate) fn parse(text: &str) -> Result<Duration, String> {
        super::quantity::parse(text, &UNITS, EXAMPLE).map(Duration::from_secs)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        super::quantity::deserialize(d, &UNITS, EXAMPLE).map(Duration::from_secs)
    }

    pub(crate) fn serialize<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::quantity::format(d.as_secs(), &UNITS))
    }

    pub(crate) mod option {
        use super::*;

        pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
            d: D,
        ) -> Result<Option<Duration>, D::Error> {
            super::deserialize(d).map(Some)
        }

        pub(crate) fn serialize<S: serde::Serializer>(
            d: &Option<Duration>,
            s: S,
        ) -> Result<S::Ok, S::Error> {
            match d {
                Some(d) => super::serialize(d, s),
                None => s.serialize_none(),
            }
        }
    }
}
