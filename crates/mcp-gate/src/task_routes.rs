//! Where each task (of either era) handed to a client lives ([`crate::tasks`]): the
//! gateway's handle, the caller it belongs to, the module client that created it (and which
//! life of it) and the module's id for it, kept until the task's time to live ends.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use mcp_upstream::Module;
use mcp_upstream::registry::ToolEntry;
use mcp_wire::tasks::CreatedTask;

/// Most tasks one caller has open (or being created) through the gateway at once.
pub const MAX_TASKS_PER_CALLER: usize = 256;
/// Most tasks open through this instance at once.
pub const MAX_TASKS: usize = 16 * 1024;
/// How long a route is kept when the module gives its task no time to live (or a longer
/// one than this).
pub const LONGEST_ROUTE: Duration = Duration::from_secs(24 * 60 * 60);

/// Where each task a client was handed lives.
#[derive(Default)]
pub struct TaskRoutes {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    routes: HashMap<String, Route>,
    /// Tasks being created now, per caller (counted against the caps until adopted or
    /// given up).
    creating: HashMap<String, usize>,
}

impl Inner {
    /// Drops the routes whose time is up (and so their hold on the module client).
    fn purge(&mut self, now: Instant) {
        self.routes.retain(|_, r| r.expires > now);
    }
}

/// One task: whose it is, the module client that created it, and its id there.
#[derive(Clone)]
pub(crate) struct Route {
    /// The caller's instance key ([`crate::instance_key`]).
    pub(crate) who: String,
    pub(crate) module: Arc<dyn Module>,
    /// The module's life the task was created in ([`Module::generation`]).
    pub(crate) generation: u64,
    /// The module's id for it.
    pub(crate) upstream: String,
    /// The tool it runs (the module's questions while it runs are attributed to it).
    pub(crate) entry: Arc<ToolEntry>,
    pub(crate) expires: Instant,
    /// A task of the 2026-07-28 tasks extension (else of 2025-11-25).
    pub(crate) modern: bool,
}

/// Why a caller may not start a task now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoRoom {
    /// The caller has [`MAX_TASKS_PER_CALLER`] open.
    Caller,
    /// This instance has [`MAX_TASKS`] open.
    Instance,
}

impl NoRoom {
    /// The in-band refusal of a task-augmented call there is no room for.
    pub fn result(self) -> serde_json::Value {
        let text = match self {
            NoRoom::Caller => format!(
                "this caller already has {MAX_TASKS_PER_CALLER} tasks open through the gateway; wait for some to end (or cancel them), then call again"
            ),
            NoRoom::Instance => {
                format!("the gateway has {MAX_TASKS} tasks open; try again once some have ended")
            }
        };
        mcp_wire::tools::text_result(&text, None, true)
    }
}

/// A task being created for a caller: counted against the caps until it is adopted or
/// dropped.
pub(crate) struct Reservation<'a> {
    routes: &'a TaskRoutes,
    who: String,
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        let mut inner = self.routes.inner();
        if let Some(count) = inner.creating.get_mut(&self.who) {
            *count -= 1;
            if *count == 0 {
                inner.creating.remove(&self.who);
            }
        }
    }
}

impl TaskRoutes {
    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Room for one more task of `who`, held until the task is adopted or the reservation
    /// dropped (so calls in flight together cannot pass the caps).
    pub(crate) fn reserve(&self, who: &str) -> Result<Reservation<'_>, NoRoom> {
        let mut inner = self.inner();
        inner.purge(Instant::now());
        let creating: usize = inner.creating.values().sum();
        if inner.routes.len() + creating >= MAX_TASKS {
            return Err(NoRoom::Instance);
        }
        let mine = inner.routes.values().filter(|r| r.who == who).count()
            + inner.creating.get(who).copied().unwrap_or(0);
        if mine >= MAX_TASKS_PER_CALLER {
            return Err(NoRoom::Caller);
        }
        *inner.creating.entry(who.to_owned()).or_default() += 1;
        Ok(Reservation {
            routes: self,
            who: who.to_owned(),
        })
    }

    /// Records `created` for the reservation's caller; its handle, or `None` when no random
    /// handle could be made.
    pub(crate) fn adopt(
        &self,
        reservation: Reservation<'_>,
        module: Arc<dyn Module>,
        created: &CreatedTask,
        entry: &ToolEntry,
        modern: bool,
    ) -> Option<String> {
        let handle = format!("task-{}", mcp_random::hex_token::<16>().ok()?);
        let lives = created
            .ttl_ms
            .map_or(LONGEST_ROUTE, Duration::from_millis)
            .min(LONGEST_ROUTE);
        let route = Route {
            who: reservation.who.clone(),
            generation: module.generation(),
            module,
            upstream: created.task_id.clone(),
            entry: Arc::new(entry.clone()),
            expires: Instant::now() + lives,
            modern,
        };
        self.inner().routes.insert(handle.clone(), route);
        // Counted as a route now (the reservation's drop uncounts its creation).
        drop(reservation);
        Some(handle)
    }

    /// The route of `handle`, when it is `who`'s, still alive, and at the life of its
    /// module it was created in (a module that forgot its tasks may reuse their ids for
    /// someone else's: the route is forgotten).
    pub(crate) fn find(&self, who: &str, handle: &str) -> Option<Route> {
        let mut inner = self.inner();
        inner.purge(Instant::now());
        let route = inner.routes.get(handle).filter(|r| r.who == who)?.clone();
        if route.module.generation() != route.generation {
            inner.routes.remove(handle);
            return None;
        }
        Some(route)
    }

    /// `who`'s live tasks, oldest first.
    pub(crate) fn of(&self, who: &str) -> Vec<(String, Route)> {
        let mut inner = self.inner();
        inner.purge(Instant::now());
        inner
            .routes
            .retain(|_, r| r.module.generation() == r.generation);
        let mut mine: Vec<(String, Route)> = inner
            .routes
            .iter()
            .filter(|(_, r)| r.who == who)
            .map(|(h, r)| (h.clone(), r.clone()))
            .collect();
        mine.sort_by_key(|(_, r)| r.expires);
        mine
    }

    pub(crate) fn forget(&self, handle: &str) {
        self.inner().routes.remove(handle);
    }
}
