//! `ElicitationId`: a UUID v7, built from a time and random bytes the caller supplies,
//! so this crate reads neither the clock nor a random source.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use uuid::Uuid;

/// The identity of one elicitation. Time-ordered (UUID v7), so ids sort by creation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ElicitationId(Uuid);

impl ElicitationId {
    /// A UUID v7 for `now`, with the 74 random bits taken from `random`.
    ///
    /// The caller supplies the randomness (from a CSPRNG in production), which keeps this
    /// crate free of IO and makes ids reproducible in tests.
    pub fn v7(now: OffsetDateTime, random: [u8; 10]) -> Self {
        let millis = u64::try_from(now.unix_timestamp_nanos() / 1_000_000).unwrap_or(0);
        ElicitationId(uuid::Builder::from_unix_timestamp_millis(millis, &random).into_uuid())
    }

    /// Wraps an existing UUID (for example one read back from the database).
    pub const fn from_uuid(uuid: Uuid) -> Self {
        ElicitationId(uuid)
    }

    /// The underlying UUID.
    pub const fn as_uuid(&self) -> &Uuid {
        &self.0
    }
}

impl fmt::Display for ElicitationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.hyphenated().fmt(f)
    }
}

impl FromStr for ElicitationId {
    type Err = uuid::Error;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Uuid::parse_str(s).map(ElicitationId)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    #[test]
    fn v7_ids_are_version_7_and_sort_by_time() {
        let a = ElicitationId::v7(datetime!(2026-11-30 10:00:00 UTC), [0xff; 10]);
        let b = ElicitationId::v7(datetime!(2026-11-30 10:00:01 UTC), [0x00; 10]);
        assert_eq!(a.as_uuid().get_version_num(), 7);
        assert!(
            a < b,
            "later ids sort after earlier ones whatever their random bits"
        );
    }

    #[test]
    fn display_and_from_str_round_trip() {
        let id = ElicitationId::v7(datetime!(2026-11-30 10:00:00 UTC), [7; 10]);
        assert_eq!(id.to_string().parse::<ElicitationId>().unwrap(), id);
        assert!("not-a-uuid".parse::<ElicitationId>().is_err());
        assert_eq!(
            serde_json::to_value(id).unwrap(),
            serde_json::Value::String(id.to_string())
        );
    }
}
