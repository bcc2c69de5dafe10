//! A histogram every worker thread observes without a lock: `prometheus_client`'s takes a
//! mutex per observation, and the gateway observes one on every call (its own time, the
//! module's, the store's), so on many cores every call of every worker queued on the same
//! lock and its cache line. Here each thread writes one of [`SHARDS`] shards (atomic
//! counts, a cache line or more apart) and a scrape adds them up.

use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::{MetricType, TypedMetric};

/// Shards per histogram: threads beyond this share one (round-robin).
const SHARDS: usize = 16;
/// Upper bounds a histogram may have (the last, +Inf, added): the gateway's have 16 and 11.
const MAX_BUCKETS: usize = 23;

/// One thread's counts: a bucket's count per upper bound and the sum's bits (the count is
/// the buckets' total, so a scrape never reads a count its buckets do not add up to).
#[repr(align(128))]
struct Shard {
    buckets: [AtomicU64; MAX_BUCKETS + 1],
    sum: AtomicU64,
}

impl Default for Shard {
    fn default() -> Self {
        Shard {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            sum: AtomicU64::new(0f64.to_bits()),
        }
    }
}

struct Inner {
    /// Upper bounds, ascending, the last +Inf.
    bounds: Vec<f64>,
    shards: Box<[Shard]>,
}

/// A histogram with fixed buckets (a cheap clone: the same counts).
#[derive(Clone)]
pub(crate) struct Histogram(Arc<Inner>);

impl std::fmt::Debug for Histogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Histogram")
            .field("bounds", &self.0.bounds)
            .finish_non_exhaustive()
    }
}

thread_local! {
    /// This thread's shard.
    static SHARD: Cell<Option<usize>> = const { Cell::new(None) };
}

/// The shard of the calling thread, handed out round-robin on its first observation.
fn shard() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    SHARD.with(|shard| {
        shard.get().unwrap_or_else(|| {
            let mine = NEXT.fetch_add(1, Ordering::Relaxed) % SHARDS;
            shard.set(Some(mine));
            mine
        })
    })
}

impl Histogram {
    /// A histogram with these upper bounds (finite, ascending, at most 23) and +Inf.
    pub(crate) fn new(bounds: impl IntoIterator<Item = f64>) -> Histogram {
        let mut bounds: Vec<f64> = bounds.into_iter().filter(|b| b.is_finite()).collect();
        assert!(
            bounds.len() <= MAX_BUCKETS,
            "a histogram has at most {MAX_BUCKETS} bounds"
        );
        bounds.push(f64::INFINITY);
        Histogram(Arc::new(Inner {
            bounds,
            shards: (0..SHARDS).map(|_| Shard::default()).collect(),
        }))
    }

    /// Counts `value` (a NaN in the last bucket, as `prometheus_client` does).
    pub(crate) fn observe(&self, value: f64) {
        let inner = &*self.0;
        let bucket = inner
            .bounds
            .iter()
            .position(|bound| value <= *bound)
            .unwrap_or(inner.bounds.len() - 1);
        let shard = &inner.shards[shard()];
        shard.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        // Only this thread (and those sharing its shard) write here: the loop rarely turns.
        let _ = shard
            .sum
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
                Some((f64::from_bits(bits) + value).to_bits())
            });
    }

    /// (sum, count, each bucket's count with its upper bound), the shards added up.
    fn snapshot(&self) -> (f64, u64, Vec<(f64, u64)>) {
        let inner = &*self.0;
        let mut buckets: Vec<(f64, u64)> = inner.bounds.iter().map(|b| (*b, 0)).collect();
        let mut sum = 0.0;
        for shard in &inner.shards {
            sum += f64::from_bits(shard.sum.load(Ordering::Relaxed));
            for (total, counted) in buckets.iter_mut().zip(&shard.buckets) {
                total.1 += counted.load(Ordering::Relaxed);
            }
        }
        let count = buckets.iter().map(|(_, n)| n).sum();
        (sum, count, buckets)
    }
}

impl TypedMetric for Histogram {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for Histogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let (sum, count, buckets) = self.snapshot();
        encoder.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::encoding::text::encode;
    use prometheus_client::registry::Registry;

    fn text(histogram: &Histogram) -> String {
        let mut registry = Registry::default();
        registry.register("h", "help", histogram.clone());
        let mut out = String::new();
        encode(&mut out, &registry).unwrap();
        out
    }

    #[test]
    fn reads_like_prometheus_clients_own_from_every_thread() {
        let ours = Histogram::new([0.1, 1.0, 10.0]);
        let theirs = prometheus_client::metrics::histogram::Histogram::new([0.1, 1.0, 10.0]);
        let values = [0.05, 0.1, 0.5, 2.0, 20.0, f64::NAN, 1.0];
        std::thread::scope(|scope| {
            for _ in 0..20 {
                scope.spawn(|| {
                    for v in values {
                        ours.observe(v);
                    }
                });
            }
        });
        for _ in 0..20 {
            for v in values {
                theirs.observe(v);
            }
        }
        let mut registry = Registry::default();
        registry.register("h", "help", theirs);
        let mut expected = String::new();
        encode(&mut expected, &registry).unwrap();
        // The sum holds a NaN in both; every other line is the same.
        let lines = |t: &str| {
            t.lines()
                .filter(|l| !l.starts_with("h_sum"))
                .map(str::to_owned)
                .collect::<Vec<_>>()
        };
        assert_eq!(lines(&text(&ours)), lines(&expected));
        assert!(text(&ours).contains("h_count 140"), "{}", text(&ours));
        assert!(
            text(&ours).contains("h_bucket{le=\"1.0\"} 80"),
            "{}",
            text(&ours)
        );
    }

    #[test]
    fn the_sum_adds_every_thread() {
        let ours = Histogram::new([1.0]);
        std::thread::scope(|scope| {
            for _ in 0..40 {
                scope.spawn(|| ours.observe(0.25));
            }
        });
        assert!(text(&ours).contains("h_sum 10.0"), "{}", text(&ours));
    }
}
