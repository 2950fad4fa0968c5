//! Folding a burst of file events into one [`Change`].
//!
//! The debouncer is a plain state machine fed with timestamps, so its timing
//! is tested without a clock. It is trailing: a burst ends when `quiet` has
//! passed with no further event. A burst that never goes quiet (a build
//! writing for minutes) still ends `cap` after its first event.

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::Duration;

use tokio::time::Instant;

/// How many paths a [`Change`] lists at most.
pub const MAX_LISTED: usize = 20;

/// How many distinct paths a burst tracks for [`Change::count`]; past this
/// the count is a lower bound, so a huge burst costs bounded memory.
pub const MAX_TRACKED: usize = 10_000;

/// The longest a burst may run before it is reported anyway, unless the
/// debounce itself is longer.
const MAX_CAP: Duration = Duration::from_secs(5);

/// One debounced burst of changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// The distinct changed paths, in the order first seen, at most
    /// [`MAX_LISTED`].
    pub paths: Vec<PathBuf>,
    /// How many distinct paths changed in the burst. It can be larger than
    /// `paths.len()`, and it is 0 when the watcher only knows that something
    /// changed (the kernel's event queue overflowed).
    pub count: usize,
}

/// Folds timestamped events into bursts.
#[derive(Debug)]
pub struct Debouncer {
    quiet: Duration,
    cap: Duration,
    burst: Option<Burst>,
}

#[derive(Debug)]
struct Burst {
    first: Instant,
    last: Instant,
    paths: Vec<PathBuf>,
    seen: HashSet<PathBuf>,
}

// === impl Debouncer ===

impl Debouncer {
    /// A debouncer that ends a burst after `quiet` without events, or
    /// `min(10 × quiet, 5 s)` (but never less than `quiet`) after its start.
    pub fn new(quiet: Duration) -> Self {
        let cap = quiet.saturating_mul(10).min(MAX_CAP).max(quiet);
        Self {
            quiet,
            cap,
            burst: None,
        }
    }

    /// The hard cap on one burst's length.
    pub fn cap(&self) -> Duration {
        self.cap
    }

    /// Records one relevant event at `now` that touched `paths` (none when
    /// the watcher only knows that something changed).
    pub fn push(&mut self, now: Instant, paths: impl IntoIterator<Item = PathBuf>) {
        let burst = self.burst.get_or_insert_with(|| Burst {
            first: now,
            last: now,
            paths: Vec::new(),
            seen: HashSet::new(),
        });
        burst.last = burst.last.max(now);
        for path in paths {
            if burst.seen.len() >= MAX_TRACKED || burst.seen.contains(&path) {
                continue;
            }
            if burst.paths.len() < MAX_LISTED {
                burst.paths.push(path.clone());
            }
            burst.seen.insert(path);
        }
    }

    /// When the burst in progress ends, if one is.
    pub fn deadline(&self) -> Option<Instant> {
        let burst = self.burst.as_ref()?;
        Some((burst.last + self.quiet).min(burst.first + self.cap))
    }

    /// Ends the burst in progress if its deadline is reached at `now`.
    pub fn poll(&mut self, now: Instant) -> Option<Change> {
        if now < self.deadline()? {
            return None;
        }
        self.flush()
    }

    /// Ends the burst in progress now, whatever its deadline.
    pub fn flush(&mut self) -> Option<Change> {
        let burst = self.burst.take()?;
        Some(Change {
            count: burst.seen.len(),
            paths: burst.paths,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn p(s: &str) -> PathBuf {
        PathBuf::from(s)
    }

    #[test]
    fn idle_has_no_deadline() {
        let mut d = Debouncer::new(ms(100));
        assert_eq!(d.deadline(), None);
        assert_eq!(d.poll(Instant::now()), None);
        assert_eq!(d.flush(), None);
    }

    #[test]
    fn a_storm_is_one_change() {
        let t0 = Instant::now();
        let mut d = Debouncer::new(ms(100));
        for i in 0..20 {
            d.push(t0 + ms(i * 5), [p("server.py")]);
            assert_eq!(d.poll(t0 + ms(i * 5)), None);
        }
        // The last write was at 95 ms: quiet until 195 ms.
        assert_eq!(d.deadline(), Some(t0 + ms(195)));
        assert_eq!(d.poll(t0 + ms(194)), None);
        let change = d
            .poll(t0 + ms(195))
            .expect("burst ends after the quiet period");
        assert_eq!(change.paths, vec![p("server.py")]);
        assert_eq!(change.count, 1);
        assert_eq!(d.deadline(), None);
    }

    #[test]
    fn quiet_gap_splits_bursts() {
        let t0 = Instant::now();
        let mut d = Debouncer::new(ms(100));
        d.push(t0, [p("a")]);
        assert!(d.poll(t0 + ms(100)).is_some());
        d.push(t0 + ms(150), [p("b")]);
        assert_eq!(d.deadline(), Some(t0 + ms(250)));
        let change = d.poll(t0 + ms(250)).expect("second burst");
        assert_eq!(change.paths, vec![p("b")]);
    }

    #[test]
    fn endless_stream_is_capped() {
        let t0 = Instant::now();
        let mut d = Debouncer::new(ms(100));
        assert_eq!(d.cap(), ms(1000));
        let mut t = t0;
        let mut fired = None;
        while t < t0 + ms(3000) {
            d.push(t, [p("log")]);
            if let Some(c) = d.poll(t) {
                fired = Some((t, c));
                break;
            }
            t += ms(50);
        }
        let (at, change) = fired.expect("a never-quiet stream still yields a change");
        assert_eq!(at, t0 + ms(1000));
        assert_eq!(change.count, 1);
    }

    #[test]
    fn cap_is_bounded_but_never_below_quiet() {
        assert_eq!(Debouncer::new(ms(2000)).cap(), Duration::from_secs(5));
        assert_eq!(
            Debouncer::new(Duration::from_secs(8)).cap(),
            Duration::from_secs(8)
        );
        assert_eq!(Debouncer::new(Duration::ZERO).cap(), Duration::ZERO);
    }

    #[test]
    fn paths_are_distinct_and_listed_up_to_the_bound() {
        let t0 = Instant::now();
        let mut d = Debouncer::new(ms(10));
        for round in 0..2 {
            for i in 0..(MAX_LISTED + 5) {
                d.push(t0 + ms(round), [p(&format!("f{i}"))]);
            }
        }
        let change = d.flush().expect("burst");
        assert_eq!(change.count, MAX_LISTED + 5);
        assert_eq!(change.paths.len(), MAX_LISTED);
        assert_eq!(change.paths[0], p("f0"));
    }

    #[test]
    fn pathless_event_still_makes_a_change() {
        let t0 = Instant::now();
        let mut d = Debouncer::new(ms(10));
        d.push(t0, []);
        let change = d.poll(t0 + ms(10)).expect("overflow is a change");
        assert_eq!(change.count, 0);
        assert!(change.paths.is_empty());
    }

    #[test]
    fn tracking_is_bounded() {
        let t0 = Instant::now();
        let mut d = Debouncer::new(ms(10));
        d.push(t0, (0..MAX_TRACKED + 100).map(|i| p(&i.to_string())));
        assert_eq!(d.flush().map(|c| c.count), Some(MAX_TRACKED));
    }
}
