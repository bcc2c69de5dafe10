//! Module state kept apart between callers: an isolated module runs one instance per caller
//! — its own upstream session for an HTTP module, its own process for a stdio module — so
//! what one caller's calls leave in a module (session resources, roots, subscriptions,
//! notifications) never reaches another caller. The module's shared instance lists the
//! catalog (a list does not vary per connection) and serves callers when the module keeps
//! no state (a 2026-07-28 HTTP module: [`crate::Module::stateless`]).
//!
//! Instances start on a caller's first request, are bounded in number (the least recently
//! used idle one makes room; with every instance in use a new caller is refused as busy),
//! and stop after they have been idle a while.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::{Module, ModuleError};

/// Starts one instance of a module for the caller whose instance key it is given (ready to
/// serve, or as ready as it gets in its start-up wait).
pub type StartInstance = Arc<
    dyn Fn(&str) -> Pin<Box<dyn Future<Output = Result<Arc<dyn Module>, ModuleError>> + Send>>
        + Send
        + Sync,
>;

/// How an isolated module runs its per-caller instances.
#[derive(Clone)]
pub struct Isolation {
    /// Starts an instance.
    pub start: StartInstance,
    /// At most this many instances at once (callers beyond, with all in use, are busy).
    pub max_instances: usize,
    /// An instance unused this long is stopped.
    pub idle: Duration,
    /// Each instance sends its caller's own credentials (their kind, for the audit record):
    /// every caller is served by its own instance, even by a module that keeps no state,
    /// and nothing is sent for a request without a caller.
    pub per_person: Option<&'static str>,
}

impl std::fmt::Debug for Isolation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Isolation")
            .field("max_instances", &self.max_instances)
            .field("idle", &self.idle)
            .field("per_person", &self.per_person)
            .finish_non_exhaustive()
    }
}

/// A caller's instance: started once (its callers wait for the start, nobody else does).
struct Live {
    instance: Arc<tokio::sync::OnceCell<Arc<dyn Module>>>,
    last_used: Instant,
}

impl Live {
    /// The instance, when it started and nobody but the map holds it now.
    fn idle(&self) -> Option<&Arc<dyn Module>> {
        self.instance
            .get()
            .filter(|module| Arc::strong_count(module) == 1)
    }
}

/// The running per-caller instances of one module.
pub(crate) struct Instances {
    module: String,
    /// At most this many at once.
    max_instances: usize,
    /// An instance unused this long is stopped.
    idle: Duration,
    /// Each caller's own credentials' kind, for a module run as its callers.
    per_person: Option<&'static str>,
    live: tokio::sync::Mutex<HashMap<String, Live>>,
}

impl Instances {
    /// The kind of each caller's own credentials, for a module run as its callers.
    pub(crate) fn per_person(&self) -> Option<&'static str> {
        self.per_person
    }

    pub(crate) fn new(module: String, isolation: &Isolation) -> Self {
        Instances {
            module,
            max_instances: isolation.max_instances,
            idle: isolation.idle,
            per_person: isolation.per_person,
            live: tokio::sync::Mutex::new(HashMap::new()),
        }
    }

    /// Instances started by whoever asks ([`Instances::of`]), at most `max_instances`,
    /// stopped after `idle`.
    pub(crate) fn bounded(module: String, max_instances: usize, idle: Duration) -> Self {
        Instances {
            module,
            max_instances,
            idle,
            per_person: None,
            live: tokio::sync::Mutex::new(HashMap::new()),
        }
    }

    /// The instance of caller `who`, started now by `start` if it has none (then `true`).
    /// Starting one holds up only that caller's requests.
    pub(crate) async fn of<F>(
        &self,
        who: &str,
        start: impl FnOnce() -> F,
    ) -> Result<(Arc<dyn Module>, bool), ModuleError>
    where
        F: Future<Output = Result<Arc<dyn Module>, ModuleError>>,
    {
        let slot = {
            let mut live = self.live.lock().await;
            if let Some(instance) = live.get_mut(who) {
                instance.last_used = Instant::now();
                instance.instance.clone()
            } else {
                if live.len() >= self.max_instances.max(1) {
                    // Room from the least recently used instance nobody is using now.
                    let idle = live
                        .iter()
                        .filter(|(_, l)| l.idle().is_some())
                        .min_by_key(|(_, l)| l.last_used)
                        .map(|(k, _)| k.clone());
                    let Some(idle) = idle else {
                        return Err(ModuleError::Busy {
                            module: self.module.clone(),
                            running: live.len(),
                        });
                    };
                    if let Some(old) = live.remove(&idle).and_then(|l| l.instance.get().cloned()) {
                        tracing::info!(module = %self.module, "a caller's module instance is stopped to make room for another's");
                        tokio::spawn(async move { old.shutdown().await });
                    }
                }
                let slot = Arc::new(tokio::sync::OnceCell::new());
                live.insert(
                    who.to_owned(),
                    Live {
                        instance: slot.clone(),
                        last_used: Instant::now(),
                    },
                );
                slot
            }
        };
        let started = std::sync::atomic::AtomicBool::new(false);
        let module = slot
            .get_or_try_init(|| async {
                started.store(true, std::sync::atomic::Ordering::Relaxed);
                start().await
            })
            .await;
        match module {
            Ok(module) => {
                let started = started.load(std::sync::atomic::Ordering::Relaxed);
                if started {
                    tracing::info!(module = %self.module, "a module instance started for a caller");
                }
                Ok((module.clone(), started))
            }
            Err(e) => {
                // Not started: the next request tries again.
                let mut live = self.live.lock().await;
                if live
                    .get(who)
                    .is_some_and(|l| Arc::ptr_eq(&l.instance, &slot))
                {
                    live.remove(who);
                }
                Err(e)
            }
        }
    }

    /// Stops the instances unused for the idle time (and not in use now).
    pub(crate) async fn sweep(&self) {
        let idle = self.idle;
        let stopped: Vec<Arc<dyn Module>> = {
            let mut live = self.live.lock().await;
            let expired: Vec<String> = live
                .iter()
                .filter(|(_, l)| l.last_used.elapsed() >= idle && l.idle().is_some())
                .map(|(k, _)| k.clone())
                .collect();
            expired
                .iter()
                .filter_map(|k| live.remove(k))
                .filter_map(|l| l.instance.get().cloned())
                .collect()
        };
        for instance in stopped {
            tracing::info!(module = %self.module, "an idle caller's module instance stopped");
            instance.shutdown().await;
        }
    }

    /// Every instance running now.
    pub(crate) async fn all(&self) -> Vec<Arc<dyn Module>> {
        self.live
            .lock()
            .await
            .values()
            .filter_map(|l| l.instance.get().cloned())
            .collect()
    }

    /// Stops every instance.
    pub(crate) async fn shutdown(&self) {
        let stopped: Vec<Arc<dyn Module>> = self
            .live
            .lock()
            .await
            .drain()
            .filter_map(|(_, l)| l.instance.get().cloned())
            .collect();
        for instance in stopped {
            instance.shutdown().await;
        }
    }
}
