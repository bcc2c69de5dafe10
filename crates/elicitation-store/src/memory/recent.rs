//! The memory store's audit trail: the most recent events, bounded, lost on restart.

use std::collections::VecDeque;

use elicitation_core::ElicitationId;
use serde_json::Value;
use time::OffsetDateTime;

use crate::Caller;
use crate::audit::{AuditEntry, AuditEvent, AuditHolds, AuditOrder, AuditPage, AuditQuery};

/// Most audit events the memory store keeps: past it, the oldest go (and are counted).
pub const MAX_MEMORY_AUDIT_EVENTS: usize = 10_000;

/// The recent events, oldest first, with ids from 1 that never repeat.
pub(super) struct Recent {
    entries: VecDeque<AuditEntry>,
    capacity: usize,
    next_id: i64,
    dropped: u64,
}

impl Default for Recent {
    fn default() -> Self {
        Recent::with_capacity(MAX_MEMORY_AUDIT_EVENTS)
    }
}

impl Recent {
    pub(super) fn with_capacity(capacity: usize) -> Recent {
        Recent {
            entries: VecDeque::new(),
            capacity: capacity.max(1),
            next_id: 1,
            dropped: 0,
        }
    }

    /// Records one event.
    pub(super) fn push(
        &mut self,
        at: OffsetDateTime,
        event: AuditEvent,
        caller: &Caller,
        elicitation: Option<ElicitationId>,
        tool: Option<&str>,
        detail: Value,
    ) {
        if self.entries.len() >= self.capacity {
            self.entries.pop_front();
            self.dropped += 1;
        }
        self.entries.push_back(AuditEntry {
            id: self.next_id,
            at,
            event: event.label().to_owned(),
            caller: caller.subject_id().to_owned(),
            tenant: caller.tenant_id().map(str::to_owned),
            elicitation_id: elicitation.map(|id| id.to_string()),
            tool: tool.map(str::to_owned),
            detail,
            sealed: false,
        });
        self.next_id += 1;
    }

    /// A page of the events of `reader`'s tenant that `query` asks for.
    pub(super) fn page(&self, reader: &Caller, query: &AuditQuery) -> AuditPage {
        let visible =
            |e: &&AuditEntry| e.tenant.as_deref() == reader.tenant_id() && query.matches(e);
        let limit = query.limit.clamp(1, crate::MAX_LIST_LIMIT);
        let entries: Vec<AuditEntry> = match query.order {
            AuditOrder::Oldest => self
                .entries
                .iter()
                .filter(|e| query.cursor.is_none_or(|after| e.id > after))
                .filter(visible)
                .take(limit)
                .cloned()
                .collect(),
            AuditOrder::Newest => self
                .entries
                .iter()
                .rev()
                .filter(|e| query.cursor.is_none_or(|before| e.id < before))
                .filter(visible)
                .take(limit)
                .cloned()
                .collect(),
        };
        AuditPage::of(
            entries,
            limit,
            AuditHolds::Recent {
                capacity: self.capacity,
                dropped: self.dropped,
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller(tenant: Option<&str>) -> Caller {
        Caller::new("alice", tenant.map(str::to_owned)).unwrap()
    }

    #[test]
    fn the_oldest_go_past_the_capacity_and_are_counted() {
        let mut recent = Recent::with_capacity(3);
        let at = OffsetDateTime::UNIX_EPOCH;
        for _ in 0..5 {
            recent.push(
                at,
                AuditEvent::ToolCallHeld,
                &caller(None),
                None,
                Some("fs__rm"),
                Value::Null,
            );
        }
        let page = recent.page(
            &caller(None),
            &AuditQuery {
                limit: 10,
                ..AuditQuery::default()
            },
        );
        let ids: Vec<i64> = page.entries.iter().map(|e| e.id).collect();
        assert_eq!(ids, [3, 4, 5]);
        assert_eq!(
            page.holds,
            AuditHolds::Recent {
                capacity: 3,
                dropped: 2
            }
        );
        assert_eq!(page.next, None, "not a full page");
    }

    #[test]
    fn a_reader_sees_only_its_tenants_events_and_pages_both_ways() {
        let mut recent = Recent::default();
        let at = OffsetDateTime::UNIX_EPOCH;
        for tenant in [
            Some("acme"),
            None,
            Some("acme"),
            Some("other"),
            Some("acme"),
        ] {
            recent.push(
                at,
                AuditEvent::ToolCallHeld,
                &caller(tenant),
                None,
                None,
                Value::Null,
            );
        }
        let acme = caller(Some("acme"));
        let first = recent.page(
            &acme,
            &AuditQuery {
                limit: 2,
                ..AuditQuery::default()
            },
        );
        assert_eq!(
            first.entries.iter().map(|e| e.id).collect::<Vec<_>>(),
            [1, 3]
        );
        assert_eq!(first.next, Some(3));
        let rest = recent.page(
            &acme,
            &AuditQuery {
                limit: 2,
                cursor: first.next,
                ..AuditQuery::default()
            },
        );
        assert_eq!(rest.entries.iter().map(|e| e.id).collect::<Vec<_>>(), [5]);
        let newest = recent.page(
            &acme,
            &AuditQuery {
                limit: 2,
                order: AuditOrder::Newest,
                ..AuditQuery::default()
            },
        );
        assert_eq!(
            newest.entries.iter().map(|e| e.id).collect::<Vec<_>>(),
            [5, 3]
        );
        let older = recent.page(
            &acme,
            &AuditQuery {
                limit: 2,
                order: AuditOrder::Newest,
                cursor: newest.next,
                ..AuditQuery::default()
            },
        );
        assert_eq!(older.entries.iter().map(|e| e.id).collect::<Vec<_>>(), [1]);
        let none = recent.page(
            &caller(None),
            &AuditQuery {
                limit: 10,
                ..AuditQuery::default()
            },
        );
        assert_eq!(
            none.entries.iter().map(|e| e.id).collect::<Vec<_>>(),
            [2],
            "no tenant is a tenant of its own"
        );
    }
}
