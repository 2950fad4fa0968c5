//! Polling a source of a `select!` only when it may have something (the
//! session's loop, and the gateway hub's).
//!
//! `select!` polls every enabled branch on each turn of the loop, and the
//! task wakes for any one of them. At one request in flight that is about
//! seven polls of the two pipes per request, five of which find nothing: a
//! framed read that asks its decoder, then the reactor, then says `Pending`.
//! A [`Gate`] gives its source a waker of its own. Once the source has said
//! `Pending` it is not polled again until that waker has fired, or until
//! [`Gate::open`] says the source changed by other means.
//!
//! The session reads its two quiet channels (controls, worker events)
//! through a [`Quiet`] instead, which asks the channel itself whether it
//! holds anything. Each is where it measured cheaper: the gateway hub's
//! loop reads its channels through gates, and reading them through
//! `Quiet`s cost it about 90 instructions a call more.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use futures_util::task::AtomicWaker;
use tokio::sync::mpsc;

/// See the module docs.
#[derive(Debug)]
pub struct Gate {
    signal: Arc<Signal>,
    /// The waker the source is polled with: `signal`'s, made once.
    waker: Waker,
    /// Whether the source must be polled next time whatever its waker did:
    /// it has not said `Pending` since it last gave something, or it was
    /// changed by other means.
    open: bool,
}

#[derive(Debug, Default)]
struct Signal {
    /// The source's waker fired since the gate last polled it.
    woken: AtomicBool,
    /// The task that polls the gate.
    task: AtomicWaker,
}

impl Wake for Signal {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.task.wake();
    }
}

impl Default for Gate {
    fn default() -> Self {
        let signal = Arc::new(Signal::default());
        let waker = Waker::from(Arc::clone(&signal));
        Self {
            signal,
            waker,
            open: true,
        }
    }
}

impl Gate {
    /// Polls the source through `poll` if it may have something; `Pending`
    /// without polling it otherwise. `poll` must follow the usual contract:
    /// `Pending` only once the waker it is given is registered.
    pub fn poll<T>(
        &mut self,
        cx: &mut Context<'_>,
        poll: impl FnOnce(&mut Context<'_>) -> Poll<T>,
    ) -> Poll<T> {
        // Registered before the flag is read: a wake after the read still
        // reaches the task.
        self.signal.task.register(cx.waker());
        let woken = self.signal.woken.swap(false, Ordering::AcqRel);
        if !self.open && !woken {
            return Poll::Pending;
        }
        let polled = poll(&mut Context::from_waker(&self.waker));
        self.open = polled.is_ready();
        polled
    }

    /// The source changed without its waker (a reader was added to it):
    /// poll it next time.
    pub fn open(&mut self) {
        self.open = true;
    }
}

/// A channel that a loop's `select!` asks on every turn but that rarely
/// has anything (controls, status events). Once a poll has found it
/// empty, the task's waker stays registered with it until a send or the
/// last sender's drop wakes the task; until then, while it is still empty
/// and open, it is not polled again. (Cheaper than a [`Gate`] for a
/// channel: the channel itself says whether it holds anything.)
#[derive(Debug)]
pub(crate) struct Quiet<T> {
    rx: mpsc::Receiver<T>,
    registered: bool,
}

impl<T> Quiet<T> {
    pub(crate) fn new(rx: mpsc::Receiver<T>) -> Self {
        Self {
            rx,
            registered: false,
        }
    }

    /// The next message, as `mpsc::Receiver::recv` gives it; while the
    /// channel is known to be empty, it waits without polling it.
    pub(crate) async fn recv(&mut self) -> Option<T> {
        std::future::poll_fn(|cx| {
            if self.registered && self.rx.is_empty() && !self.rx.is_closed() {
                return Poll::Pending;
            }
            poll_registering(&mut self.registered, self.rx.recv(), cx)
        })
        .await
    }
}

/// Polls `fut` once outside tokio's cooperative budget, so that `Pending`
/// always means its waker is registered, and notes in `registered` whether
/// it is: a caller that sees it set (and nothing changed) need not poll
/// again until woken.
pub(crate) fn poll_registering<F: std::future::Future>(
    registered: &mut bool,
    fut: F,
    cx: &mut Context<'_>,
) -> Poll<F::Output> {
    let fut = std::pin::pin!(tokio::task::unconstrained(fut));
    let polled = std::future::Future::poll(fut, cx);
    *registered = polled.is_pending();
    polled
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// A source that counts its polls and gives what `ready` holds, storing
    /// the waker it was last given as a real source would.
    #[derive(Default)]
    struct Source {
        ready: Option<u32>,
        polls: AtomicUsize,
        waker: Option<Waker>,
    }

    impl Source {
        fn poll(&mut self, cx: &mut Context<'_>) -> Poll<u32> {
            self.polls.fetch_add(1, Ordering::Relaxed);
            match self.ready.take() {
                Some(v) => Poll::Ready(v),
                None => {
                    self.waker = Some(cx.waker().clone());
                    Poll::Pending
                }
            }
        }

        fn polls(&self) -> usize {
            self.polls.load(Ordering::Relaxed)
        }
    }

    /// A task waker that counts its wakes.
    #[derive(Default)]
    struct Task(AtomicUsize);

    impl Wake for Task {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn a_source_that_said_pending_is_polled_again_only_once_woken() {
        let task = Arc::new(Task::default());
        let waker = Waker::from(Arc::clone(&task));
        let mut cx = Context::from_waker(&waker);
        let mut gate = Gate::default();
        let mut source = Source::default();

        // A new gate polls; the source has nothing and registers.
        assert!(gate.poll(&mut cx, |cx| source.poll(cx)).is_pending());
        assert_eq!(source.polls(), 1);
        // Not woken: the source is not asked again.
        for _ in 0..3 {
            assert!(gate.poll(&mut cx, |cx| source.poll(cx)).is_pending());
        }
        assert_eq!(source.polls(), 1);

        // The source's waker fires: the task is woken and the source asked.
        source.ready = Some(7);
        source.waker.take().expect("registered").wake();
        assert_eq!(task.0.load(Ordering::Relaxed), 1);
        assert_eq!(gate.poll(&mut cx, |cx| source.poll(cx)), Poll::Ready(7));
        assert_eq!(source.polls(), 2);

        // After something, it is asked again without a wake (it may hold
        // more), until it says pending.
        assert!(gate.poll(&mut cx, |cx| source.poll(cx)).is_pending());
        assert!(gate.poll(&mut cx, |cx| source.poll(cx)).is_pending());
        assert_eq!(source.polls(), 3);
    }

    #[test]
    fn an_opened_gate_polls_its_source_without_a_wake() {
        let waker = Waker::from(Arc::new(Task::default()));
        let mut cx = Context::from_waker(&waker);
        let mut gate = Gate::default();
        let mut source = Source::default();
        assert!(gate.poll(&mut cx, |cx| source.poll(cx)).is_pending());
        source.ready = Some(1);
        assert!(gate.poll(&mut cx, |cx| source.poll(cx)).is_pending());
        assert_eq!(source.polls(), 1);
        gate.open();
        assert_eq!(gate.poll(&mut cx, |cx| source.poll(cx)), Poll::Ready(1));
    }

    #[test]
    fn a_wake_while_the_task_is_not_polling_reaches_the_newest_task_waker() {
        let first = Arc::new(Task::default());
        let second = Arc::new(Task::default());
        let mut gate = Gate::default();
        let mut source = Source::default();
        let waker = Waker::from(Arc::clone(&first));
        assert!(
            gate.poll(&mut Context::from_waker(&waker), |cx| source.poll(cx))
                .is_pending()
        );
        let waker = Waker::from(Arc::clone(&second));
        assert!(
            gate.poll(&mut Context::from_waker(&waker), |cx| source.poll(cx))
                .is_pending()
        );
        source.waker.take().expect("registered").wake();
        assert_eq!(first.0.load(Ordering::Relaxed), 0);
        assert_eq!(second.0.load(Ordering::Relaxed), 1);
    }
}
