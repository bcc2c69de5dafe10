//! The audit chain (V17): each audit row's `mac` is HMAC-SHA256, keyed from the seal keys
//! (HKDF info [`CHAIN_KEY_INFO`]), over the previous sealed row's `mac` and this row's
//! fields ([`link`]). Rows are sealed after they settle, in id order, by one instance at a
//! time ([`PostgresStore::seal_audit`]); [`verify_audit`] walks the whole chain.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration as StdDuration;

use ring::hmac;
use serde_json::json;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use tokio_postgres::Row;
use uuid::Uuid;

use super::{PostgresStore, sql};
use crate::error::map_db_error;
use crate::{KeyRing, StoreError};

/// The HKDF info of the chain's key (apart from every other use of the seal keys).
pub const CHAIN_KEY_INFO: &str = "mcp-gateway/audit-chain/v1";

/// How old a row must be before it is sealed: longer than any statement may run
/// (`operation_timeout`, at most 10 s), so no row below it can still be committed.
pub(crate) const SETTLE: StdDuration = StdDuration::from_secs(15);

/// Rows sealed per statement.
const BATCH: i32 = 500;
/// Most statements of one sealing pass (a pass seals up to `BATCH × PASSES` rows, so a
/// sweep keeps up with 20,000 audit rows per sweep interval, and starts none after half the
/// operation timeout; a longer backlog takes several sweeps).
const PASSES: usize = 40;

/// Sweeps, in this process, that found the chain blocked by a row dated in the future.
static STALLED: AtomicU64 = AtomicU64::new(0);

/// How many sweeps of this process found the audit chain blocked: a row after the head
/// dated more than the settling time (15 s) ahead, which no later sweep can pass (exported as
/// `mcp_gateway_audit_seal_stalled_total`).
pub fn audit_seal_stalls() -> u64 {
    STALLED.load(Ordering::Relaxed)
}

fn count_stall() {
    STALLED.fetch_add(1, Ordering::Relaxed);
}

/// One audit row's fields, as the chain covers them.
#[derive(Debug, Clone)]
struct Fields {
    id: i64,
    at: OffsetDateTime,
    event: String,
    subject: String,
    tenant: Option<String>,
    elicitation: Option<Uuid>,
    tool: Option<String>,
    /// `detail` as PostgreSQL writes jsonb out (one canonical text).
    detail: String,
}

impl Fields {
    fn of(row: &Row) -> Fields {
        Fields {
            id: row.get("id"),
            at: row.get("at"),
            event: row.get("event"),
            subject: row.get("caller_subject"),
            tenant: row.get("caller_tenant"),
            elicitation: row.get("elicitation_id"),
            tool: row.get("tool_name"),
            detail: row.get("detail"),
        }
    }
}

/// The link of `row` after `previous` (the previous sealed row's MAC; empty for the first).
fn link(key: &[u8; 32], previous: &[u8], row: &Fields) -> [u8; 32] {
    let fields = json!([
        row.id,
        row.at.format(&Rfc3339).unwrap_or_default(),
        row.event,
        row.subject,
        row.tenant,
        row.elicitation.map(|u| u.to_string()),
        row.tool,
        row.detail,
    ])
    .to_string();
    let key = hmac::Key::new(hmac::HMAC_SHA256, key);
    let mut context = hmac::Context::with_key(&key);
    context.update(&(previous.len() as u64).to_be_bytes());
    context.update(previous);
    context.update(fields.as_bytes());
    let mut mac = [0u8; 32];
    mac.copy_from_slice(context.sign().as_ref());
    mac
}

fn hex(bytes: &[u8]) -> String {
    mcp_random::hex(bytes)
}

/// What a sealing pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChainSealed {
    /// Rows sealed now.
    pub sealed: usize,
    /// The head after the pass: its row id and MAC (hex); `None` while nothing is sealed.
    pub head: Option<(i64, String)>,
    /// The row the pass could not pass because it is dated in the future (more than
    /// the settling time, 15 s, ahead of the gateway's clock), and its date: every row after it stays
    /// unsealed until it is dealt with (docs/audit.md).
    pub stalled: Option<(i64, OffsetDateTime)>,
}

impl PostgresStore {
    /// Seals the settled rows after the chain's head, in id order, under the active seal
    /// key — unless another instance holds the chain now (then nothing, and it does).
    pub async fn seal_audit(&self) -> Result<ChainSealed, StoreError> {
        let keys = self.keys.derive_keys(CHAIN_KEY_INFO);
        let key = keys[0];
        let key_id = self.keys.active_key_id().to_owned();
        let now = self.now();
        let settled = now - SETTLE;
        // The whole sweep is bounded by the operation timeout: no pass starts after half
        // of it, so a long backlog is sealed over several sweeps instead of timing out.
        let stop_at = std::time::Instant::now() + self.operation_timeout / 2;
        self.with_client(async |client| {
            let locked: bool = client
                .query_one(sql::CHAIN_LOCK, &[])
                .await
                .map_err(map_db_error)?
                .get(0);
            if !locked {
                return Ok(ChainSealed::default());
            }
            let sealed = async {
                let mut done = ChainSealed::default();
                for pass in 0..PASSES {
                    // A later pass that fails keeps what the earlier ones sealed (its head is
                    // logged); the rest waits for the next sweep.
                    let failed = |e: StoreError, done: ChainSealed| {
                        if pass == 0 {
                            return Err(e);
                        }
                        tracing::warn!(error = %e, "the audit chain's sealing stopped part way; the rest waits for the next sweep");
                        Ok(done)
                    };
                    let rows = match client.query(sql::CHAIN_AFTER_HEAD, &[&BATCH]).await {
                        Ok(rows) => rows,
                        Err(e) => return failed(map_db_error(e), done),
                    };
                    let Some(first) = rows.first() else {
                        break;
                    };
                    let head_id: Option<i64> = first.get("head_id");
                    let mut head_mac: Vec<u8> =
                        first.get::<_, Option<Vec<u8>>>("head_mac").unwrap_or_default();
                    if let (Some(id), false, None) = (head_id, head_mac.is_empty(), &done.head) {
                        done.head = Some((id, hex(&head_mac)));
                    }
                    let (mut ids, mut macs) = (Vec::new(), Vec::new());
                    for row in &rows {
                        let recorded: Option<OffsetDateTime> = row.get("recorded_at");
                        // In id order, and only what has settled: the rest waits for a
                        // later pass, so no row can land below a sealed one.
                        if let Some(at) = recorded.filter(|at| *at > settled) {
                            if at > now + SETTLE && done.stalled.is_none() {
                                done.stalled = Some((row.get("id"), at));
                                count_stall();
                            }
                            break;
                        }
                        let fields = Fields::of(row);
                        let mac = link(&key, &head_mac, &fields);
                        head_mac = mac.to_vec();
                        ids.push(fields.id);
                        macs.push(mac.to_vec());
                    }
                    if ids.is_empty() {
                        break;
                    }
                    let sealed: i32 = match client
                        .query_one(sql::CHAIN_SEAL_MANY, &[&head_id, &ids, &macs, &key_id])
                        .await
                    {
                        Ok(row) => row.get(0),
                        Err(e) => return failed(map_db_error(e), done),
                    };
                    let sealed = usize::try_from(sealed).unwrap_or(0).min(ids.len());
                    if sealed > 0 {
                        done.sealed += sealed;
                        done.head = Some((ids[sealed - 1], hex(&macs[sealed - 1])));
                    }
                    // Stopped early (another sealer, a row not settled), nothing more, or
                    // the sweep's time is up.
                    if sealed < ids.len()
                        || rows.len() < BATCH as usize
                        || std::time::Instant::now() >= stop_at
                    {
                        break;
                    }
                }
                Ok(done)
            }
            .await;
            let unlocked = client.query_one(sql::CHAIN_UNLOCK, &[]).await;
            if let Err(e) = unlocked {
                tracing::debug!(error = %e, "the audit chain's lock was released with its connection");
            }
            sealed
        })
        .await
    }
}

/// What a walk of the chain found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainReport {
    /// Rows read.
    pub rows: u64,
    /// Rows sealed and verified.
    pub verified: u64,
    /// Rows after the head not sealed yet (the newest, still settling).
    pub unsealed_tail: u64,
    /// The head: row id and MAC (hex).
    pub head: Option<(i64, String)>,
    /// The first row where the chain breaks, and how.
    pub broken: Option<(i64, String)>,
    /// Of the unsealed tail, the row that has waited longest and when it was recorded
    /// (`None`: before V17 recorded it), by the database's clock.
    pub oldest_unsealed: Option<(i64, Option<OffsetDateTime>)>,
    /// Of the unsealed tail, the first row dated in the future (more than the settling time, 15 s, ahead
    /// of the database's clock): no sweep can seal past it.
    pub future_unsealed: Option<(i64, OffsetDateTime)>,
    /// The database's clock when the walk read its last page.
    pub checked_at: Option<OffsetDateTime>,
}

/// How long a row may wait unsealed before `audit verify` calls the chain stalled: it
/// settles, then four sweeps of `sweep_interval` have had their chance to seal it.
pub fn max_unsealed_wait(sweep_interval: StdDuration) -> StdDuration {
    SETTLE + sweep_interval.saturating_mul(4)
}

impl ChainReport {
    /// Why the unsealed tail is not merely the newest rows settling: a row dated in the
    /// future, or rows that have waited longer than `max_wait` (the sealer stopped, or
    /// cannot pass a row). `None` when it is settling (or there is none).
    pub fn stalled(&self, max_wait: StdDuration) -> Option<String> {
        if let Some((row, at)) = self.future_unsealed {
            let at = at.format(&Rfc3339).unwrap_or_default();
            return Some(format!(
                "row {row} is dated {at}, in the future: no sweep can seal past it, so none of the {} rows after the head is verified",
                self.unsealed_tail
            ));
        }
        let (row, recorded) = self.oldest_unsealed?;
        let waited = match (recorded, self.checked_at) {
            (Some(at), Some(now)) => (now - at).max(time::Duration::ZERO),
            // Recorded before the chain existed: it has waited for good.
            _ => time::Duration::MAX,
        };
        (waited > max_wait).then(|| {
            let waited = if waited == time::Duration::MAX {
                "since before the audit chain existed".to_owned()
            } else {
                format!("{} s", waited.whole_seconds())
            };
            format!(
                "row {row} has waited {waited} unsealed (longer than {} s, a few sweeps): the sealer is not running or cannot seal it, so none of the {} rows after the head is verified",
                max_wait.as_secs(),
                self.unsealed_tail
            )
        })
    }
}

/// Walks the whole chain with `client` (a role that reads every audit row: the schema
/// owner), with the MAC keys of `keys`.
// Long: one pass over the chain, keeping the previous row's MAC and the key in force between
// rows.
pub async fn verify_audit(
    client: &tokio_postgres::Client,
    keys: &KeyRing,
) -> Result<ChainReport, StoreError> {
    let derived = keys.derive_keys(CHAIN_KEY_INFO);
    let ids = keys.key_ids();
    let key_of = |id: &str| ids.iter().position(|k| k == id).map(|i| derived[i]);
    let mut report = ChainReport {
        rows: 0,
        verified: 0,
        unsealed_tail: 0,
        head: None,
        broken: None,
        oldest_unsealed: None,
        future_unsealed: None,
        checked_at: None,
    };
    let mut previous: Vec<u8> = Vec::new();
    let mut previous_id: Option<i64> = None;
    // A row not sealed although a later one is: it was put there after the chain passed.
    let mut unsealed: Vec<i64> = Vec::new();
    let mut after = i64::MIN;
    loop {
        let rows = client
            .query(sql::CHAIN_WALK, &[&after, &1000i64])
            .await
            .map_err(map_db_error)?;
        if rows.is_empty() {
            break;
        }
        for row in &rows {
            report.rows += 1;
            let fields = Fields::of(row);
            after = fields.id;
            let mac: Option<Vec<u8>> = row.get("mac");
            let key_id: Option<String> = row.get("mac_key");
            let (Some(mac), Some(key_id)) = (mac, key_id) else {
                let recorded: Option<OffsetDateTime> = row.get("recorded_at");
                let now: OffsetDateTime = row.get("checked_at");
                report.checked_at = Some(now);
                if let Some(at) = recorded.filter(|at| *at > now + SETTLE)
                    && report.future_unsealed.is_none()
                {
                    report.future_unsealed = Some((fields.id, at));
                }
                let older = match (&report.oldest_unsealed, recorded) {
                    (None, _) => true,
                    (Some((_, Some(oldest))), Some(at)) => at < *oldest,
                    (Some((_, Some(_))), None) => true,
                    (Some((_, None)), _) => false,
                };
                if older {
                    report.oldest_unsealed = Some((fields.id, recorded));
                }
                unsealed.push(fields.id);
                continue;
            };
            if let Some(first) = unsealed.first() {
                report.broken = Some((
                    *first,
                    format!(
                        "row {first} is not in the chain although row {} after it is: it was inserted (or unsealed) after the chain passed its place",
                        fields.id
                    ),
                ));
                return Ok(report);
            }
            let Some(key) = key_of(&key_id) else {
                report.broken = Some((
                    fields.id,
                    format!(
                        "row {} is sealed under key {key_id:?}, which the seal keys given do not hold",
                        fields.id
                    ),
                ));
                return Ok(report);
            };
            if link(&key, &previous, &fields).as_slice() != mac.as_slice() {
                // Ids are dense unless a transaction rolled back; a gap where the link
                // breaks is a row taken out.
                if let Some(before) = previous_id
                    && fields.id > before + 1
                {
                    report.broken = Some((
                        before + 1,
                        format!(
                            "a row between row {before} and row {} was removed (row {} no longer follows the row sealed before it)",
                            fields.id, fields.id
                        ),
                    ));
                    return Ok(report);
                }
                let what = match previous_id {
                    // Sealed on the stored MAC of the row before: if this row's own fields
                    // no longer give its MAC, it was changed; if they do with another
                    // predecessor, rows went missing or moved.
                    Some(before) => format!(
                        "row {} does not match its link after row {before}: it was changed, or a row between was removed, or rows were reordered",
                        fields.id
                    ),
                    None => format!(
                        "row {} does not match its link as the first of the chain: it was changed, or the rows before it were removed",
                        fields.id
                    ),
                };
                report.broken = Some((fields.id, what));
                return Ok(report);
            }
            report.verified += 1;
            previous = mac;
            previous_id = Some(fields.id);
            report.head = Some((fields.id, hex(&previous)));
        }
    }
    report.unsealed_tail = unsealed.len() as u64;
    Ok(report)
}

/// An audit row (its chain fields and `sealed`) as a reader gets it.
pub(super) fn entry(row: &Row) -> crate::AuditEntry {
    let fields = Fields::of(row);
    crate::AuditEntry {
        id: fields.id,
        at: fields.at,
        event: fields.event,
        caller: fields.subject,
        tenant: fields.tenant,
        elicitation_id: fields.elicitation.map(|u| u.to_string()),
        tool: fields.tool,
        detail: serde_json::from_str(&fields.detail).unwrap_or(serde_json::Value::Null),
        sealed: row.get("sealed"),
    }
}

/// One page of the audit table's events recorded from `since` (and before `until`), after
/// row `after`, in id order, as JSON objects ([`crate::AuditEntry::to_json`]): what
/// `mcp-gateway audit export` writes, a line each. Read with `client` as the schema owner
/// (every caller's rows, every tenant's).
pub async fn audit_page(
    client: &tokio_postgres::Client,
    since: OffsetDateTime,
    until: Option<OffsetDateTime>,
    after: i64,
    limit: i64,
) -> Result<Vec<serde_json::Value>, StoreError> {
    let rows = client
        .query(sql::AUDIT_PAGE, &[&since, &until, &after, &limit])
        .await
        .map_err(map_db_error)?;
    Ok(rows.iter().map(|row| entry(row).to_json()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: i64, detail: &str) -> Fields {
        Fields {
            id,
            at: OffsetDateTime::UNIX_EPOCH,
            event: "tool_call_held".into(),
            subject: "alice".into(),
            tenant: None,
            elicitation: None,
            tool: Some("fs__write_file".into()),
            detail: detail.into(),
        }
    }

    #[test]
    fn a_link_covers_every_field_and_the_previous_link() {
        let key = [7u8; 32];
        let first = link(&key, &[], &row(1, "{}"));
        assert_eq!(first, link(&key, &[], &row(1, "{}")), "deterministic");
        assert_ne!(first, link(&key, &[], &row(2, "{}")));
        assert_ne!(first, link(&key, &[], &row(1, "{\"a\": 1}")));
        assert_ne!(first, link(&key, &[1], &row(1, "{}")));
        assert_ne!(first, link(&[8u8; 32], &[], &row(1, "{}")), "keyed");
    }
}
