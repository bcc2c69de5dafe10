//! Callers' flows in PostgreSQL: one row per label a call touched and per secret it showed
//! (by fingerprint), read and written only in a transaction scoped to its caller
//! (row-level security). Each caller keeps at most the newest few rows of each kind (the
//! write trims the rest); the sweeper erases rows older than the longest window.

use async_trait::async_trait;
use gating_core::{Flow, FlowLabel, FlowLabels};
use time::OffsetDateTime;

use super::{PostgresStore, sql, tenant_param};
use crate::flows::{FLOW_FINGERPRINT_INFO, FlowStore, FlowTouch, assembled, fingerprint};
use crate::{Caller, StoreError};

/// The stored kind of a secret shown (the others are the labels' names).
const SEEN: &str = "seen";

#[async_trait]
impl FlowStore for PostgresStore {
    async fn record_flow(&self, caller: &Caller, touch: FlowTouch<'_>) -> Result<(), StoreError> {
        let mut kinds: Vec<&str> = Vec::new();
        let mut fingerprints: Vec<Option<&[u8]>> = Vec::new();
        for label in touch.labels.iter().filter(|l| *l != FlowLabel::SendsOut) {
            kinds.push(label.label());
            fingerprints.push(None);
        }
        // Each secret once (a result repeating one cannot push others out); the newest (the
        // last) are the ones a flow keeps.
        let mut distinct: Vec<&[u8; 16]> = Vec::new();
        for seen in touch.seen.iter().rev() {
            if distinct.len() < crate::flows::MAX_SEEN && !distinct.contains(&seen) {
                distinct.push(seen);
            }
        }
        for seen in distinct.into_iter().rev() {
            kinds.push(SEEN);
            fingerprints.push(Some(seen.as_slice()));
        }
        if kinds.is_empty() {
            return Ok(());
        }
        let at = elicitation_core::truncate_to_micros(touch.at);
        let per_label = i64::try_from(crate::flows::MAX_SOURCES_PER_LABEL).unwrap_or(8);
        let seen = i64::try_from(crate::flows::MAX_SEEN).unwrap_or(64);
        self.scoped(
            caller,
            sql::RECORD_FLOW,
            &[
                &caller.subject_id(),
                &tenant_param(caller),
                &touch.tool,
                &at,
                &kinds,
                &fingerprints,
                &per_label,
                &seen,
            ],
        )
        .await?;
        Ok(())
    }

    async fn flow(&self, caller: &Caller, since: OffsetDateTime) -> Result<Flow, StoreError> {
        let per_label = i64::try_from(crate::flows::MAX_SOURCES_PER_LABEL).unwrap_or(8);
        let seen = i64::try_from(crate::flows::MAX_SEEN).unwrap_or(64);
        let rows = self
            .scoped(
                caller,
                sql::READ_FLOW,
                &[
                    &caller.subject_id(),
                    &tenant_param(caller),
                    &elicitation_core::truncate_to_micros(since),
                    &per_label,
                    &seen,
                ],
            )
            .await?;
        let get_err = |e: tokio_postgres::Error| StoreError::Backend(Box::new(e));
        let mut marks = Vec::with_capacity(rows.len());
        for row in rows {
            let kind: String = row.try_get("kind").map_err(get_err)?;
            let tool: String = row.try_get("tool").map_err(get_err)?;
            let at: OffsetDateTime = row.try_get("at").map_err(get_err)?;
            if kind == SEEN {
                let bytes: Vec<u8> = row.try_get("fingerprint").map_err(get_err)?;
                // The table's check keeps them 16 bytes; anything else is skipped.
                if let Ok(fingerprint) = <[u8; 16]>::try_from(bytes.as_slice()) {
                    marks.push((tool, FlowLabels::NONE, Some(fingerprint), at));
                }
            } else if let Some(label) = FlowLabel::from_label(&kind) {
                marks.push((tool, FlowLabels::of([label]), None, at));
            }
        }
        Ok(assembled(marks))
    }

    fn flow_fingerprints(&self, secret: &str) -> Vec<[u8; 16]> {
        self.keys
            .derive_keys(FLOW_FINGERPRINT_INFO)
            .iter()
            .map(|key| fingerprint(&ring::hmac::Key::new(ring::hmac::HMAC_SHA256, key), secret))
            .collect()
    }
}
