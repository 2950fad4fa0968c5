//! The backends' sessions, run in the hub's own task.
//!
//! Each backend's session is a future the shell polls itself, not a task
//! of its own: a line the core hands a session is taken by it in the same
//! task, and the lines a session writes are queued here ([`ToHub`]) and
//! taken by the shell in the same pass that polled it, with no wake of
//! another task on either way.
//!
//! [`Sessions`] is a small executor for them. Each session has a waker of
//! its own ([`SlotWake`]): its pipes, timers and helper tasks wake it as
//! they would a task, and a woken session is marked ready and polled at
//! the shell's next pass. While the hub's task is in a turn (from the end
//! of one wait in its `select!` to the start of the next) a wake only
//! marks the session: the turn ends with a pass that polls it. Outside a
//! turn a wake also wakes the hub's task.
//!
//! Invariants: a slot is polled only from [`Sessions::poll_next`], once per
//! pass at most, and only when its waker was called since its last poll;
//! `in_turn` is false whenever the hub's task may wait, and then `ready` is
//! empty or the hub's task has been woken; the outbox that [`ToHub`] fills
//! never holds more than [`OUTBOX`] lines (a session waits for room, as it
//! would on a pipe) besides each ended session's last word, that it closed.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use futures_util::task::AtomicWaker;
use mcpvisor_jsonrpc::Spans;
use mcpvisor_session::writer::{Gone, LineSink, Message};
use parking_lot::{Mutex, MutexGuard};
use rustc_hash::FxHashMap as HashMap;

use super::backend::BackendId;
use super::{FromSession, Incoming, Input};

/// Lines the sessions may leave for the hub before a session waits.
const OUTBOX: usize = 4096;

/// A session's future as a slot polls it.
type Running = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The backends' running sessions, each by (backend, epoch).
pub(super) struct Sessions {
    slots: Vec<Option<Slot>>,
    free: Vec<usize>,
    by_key: HashMap<(BackendId, u64), usize>,
    shared: Arc<Shared>,
    /// The ready list taken for a pass, used again each time.
    pass: Vec<usize>,
}

struct Slot {
    future: Running,
    wake: Arc<SlotWake>,
    waker: Waker,
    key: (BackendId, u64),
    /// How long its stop may take.
    bound: Duration,
    /// Its stop has started (it is no longer in `by_key`).
    stopping: bool,
}

/// What the slots' wakers and the sessions' [`ToHub`]s share with the
/// shell.
struct Shared {
    state: Mutex<State>,
    /// Set whenever `ready` or `out` gains an entry; cleared by a pass
    /// before it takes them. While it is false, a pass has nothing to do.
    any: AtomicBool,
    /// The hub's task is in a turn: a wake needs no wake of it. Set by the
    /// hub before it checks `any`, as a waker sets `any` before it checks
    /// this: one of the two sees the other.
    in_turn: AtomicBool,
    /// The hub's task, woken by a wake outside a turn.
    hub: AtomicWaker,
}

#[derive(Default)]
struct State {
    /// Slots woken since their last poll.
    ready: Vec<usize>,
    /// What the sessions wrote, in order, for the core.
    out: VecDeque<Input>,
    /// Sessions waiting for room in `out`.
    blocked: Vec<Waker>,
    /// The shell is gone: the sessions' output has no reader.
    closed: bool,
}

/// One slot's waker.
struct SlotWake {
    index: usize,
    /// In `ready` already.
    queued: AtomicBool,
    shared: Arc<Shared>,
}

impl Wake for SlotWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if self.queued.swap(true, Ordering::AcqRel) {
            return;
        }
        self.shared.lock().ready.push(self.index);
        self.shared.marked();
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock()
    }

    /// After an entry went into `ready` or `out`: the hub's task is woken
    /// unless it is in a turn, which ends with a pass.
    fn marked(&self) {
        self.any.store(true, Ordering::SeqCst);
        if !self.in_turn.load(Ordering::SeqCst) {
            self.hub.wake();
        }
    }

    /// The turn is over: the hub's task may wait. Whether anything was
    /// marked meanwhile (then the hub's task must not wait).
    fn end_turn(&self) -> bool {
        self.in_turn.store(false, Ordering::SeqCst);
        self.any.load(Ordering::SeqCst)
    }
}

impl Default for Sessions {
    fn default() -> Self {
        Self {
            slots: Vec::new(),
            free: Vec::new(),
            by_key: HashMap::default(),
            shared: Arc::new(Shared {
                state: Mutex::new(State::default()),
                any: AtomicBool::new(false),
                in_turn: AtomicBool::new(false),
                hub: AtomicWaker::new(),
            }),
            pass: Vec::new(),
        }
    }
}

impl Drop for Sessions {
    fn drop(&mut self) {
        self.shared.lock().closed = true;
    }
}

impl Sessions {
    /// The sink a session of `backend` at `epoch` writes its lines to.
    pub fn sink(&self, backend: BackendId, epoch: u64) -> ToHub {
        ToHub {
            id: backend,
            epoch,
            shared: Arc::clone(&self.shared),
        }
    }

    /// Runs `session` from the next pass on; `bound` is how long its stop
    /// may take.
    pub fn insert(
        &mut self,
        backend: BackendId,
        epoch: u64,
        session: impl Future<Output = ()> + Send + 'static,
        bound: Duration,
    ) {
        let index = self.free.pop().unwrap_or_else(|| {
            self.slots.push(None);
            self.slots.len() - 1
        });
        let wake = Arc::new(SlotWake {
            index,
            queued: AtomicBool::new(false),
            shared: Arc::clone(&self.shared),
        });
        let waker = Waker::from(Arc::clone(&wake));
        self.slots[index] = Some(Slot {
            future: Box::pin(session),
            wake,
            waker: waker.clone(),
            key: (backend, epoch),
            bound,
            stopping: false,
        });
        self.by_key.insert((backend, epoch), index);
        // Its first poll starts it.
        waker.wake();
    }

    /// Starts the stop of the session of `backend` at `epoch`, if it runs:
    /// `shut` (which closes its input) is called, and the session is
    /// polled until it ends, for its stop bound at most.
    pub fn stop(&mut self, backend: BackendId, epoch: u64, shut: impl FnOnce()) {
        let Some(index) = self.by_key.remove(&(backend, epoch)) else {
            shut();
            return;
        };
        if let Some(slot) = self.slots[index].as_mut() {
            bound_slot(slot);
        }
        shut();
    }

    /// Bounds every session not stopping yet: the wait in
    /// [`Sessions::finished`] then ends.
    fn bound_all(&mut self) {
        self.by_key.clear();
        for slot in self.slots.iter_mut().flatten() {
            bound_slot(slot);
        }
    }

    /// A turn of the hub's task starts: wakes of sessions only mark them
    /// until the next pass.
    pub fn enter(&self) {
        self.shared.in_turn.store(true, Ordering::SeqCst);
    }

    /// The hub's task may wait outside [`Sessions::poll_next`] (a yield):
    /// the turn is over, and any session marked meanwhile wakes it.
    pub fn leave(&self) {
        if self.shared.end_turn() {
            self.shared.hub.wake();
        }
    }

    /// Whether a session left a line or event not taken yet.
    pub fn has_output(&self) -> bool {
        self.shared.any.load(Ordering::SeqCst) && !self.shared.lock().out.is_empty()
    }

    /// Polls each session woken since its last poll, once, then gives the
    /// oldest line or event a session left, if any. Pending with none: the
    /// turn is over, and a later wake of a session wakes `cx`'s task.
    pub fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Input> {
        self.shared.hub.register(cx.waker());
        if self.shared.any.swap(false, Ordering::SeqCst) {
            self.shared.in_turn.store(true, Ordering::SeqCst);
            std::mem::swap(&mut self.pass, &mut self.shared.lock().ready);
            let mut pass = std::mem::take(&mut self.pass);
            for &index in &pass {
                self.poll_slot(index);
            }
            pass.clear();
            self.pass = pass;
            let mut state = self.shared.lock();
            if let Some(input) = state.out.pop_front() {
                if !state.out.is_empty() || !state.ready.is_empty() {
                    self.shared.any.store(true, Ordering::SeqCst);
                }
                // Woken once the lock is let go: a waker takes it.
                let blocked = std::mem::take(&mut state.blocked);
                drop(state);
                for waker in blocked {
                    waker.wake();
                }
                return Poll::Ready(input);
            }
        }
        if self.shared.end_turn() {
            // Woken again in this pass (a yield, or its budget spent): it
            // runs in the next, after the runtime's other tasks.
            cx.waker().wake_by_ref();
        }
        Poll::Pending
    }

    fn poll_slot(&mut self, index: usize) {
        let Some(slot) = self.slots.get_mut(index).and_then(Option::as_mut) else {
            return;
        };
        slot.wake.queued.store(false, Ordering::Release);
        let mut cx = Context::from_waker(&slot.waker);
        if slot.future.as_mut().poll(&mut cx).is_pending() {
            return;
        }
        let key = slot.key;
        let stopping = slot.stopping;
        self.slots[index] = None;
        self.free.push(index);
        if !stopping {
            self.by_key.remove(&key);
        }
    }

    /// Stops waiting for what the sessions write (the core is done), and
    /// polls every session until each has ended, its stop bounded.
    pub async fn finished(&mut self) {
        self.bound_all();
        std::future::poll_fn(|cx| {
            loop {
                match self.poll_next(cx) {
                    // Nobody reads it any more.
                    Poll::Ready(_) => {}
                    Poll::Pending if self.is_empty() => return Poll::Ready(()),
                    Poll::Pending => return Poll::Pending,
                }
            }
        })
        .await;
    }

    fn is_empty(&self) -> bool {
        self.slots.iter().all(Option::is_none)
    }
}

/// Wraps a slot's session in its stop bound, once.
fn bound_slot(slot: &mut Slot) {
    if slot.stopping {
        return;
    }
    slot.stopping = true;
    let bound = slot.bound;
    let session = std::mem::replace(&mut slot.future, Box::pin(async {}));
    slot.future = Box::pin(async move {
        let _ = tokio::time::timeout(bound, session).await;
    });
    slot.waker.wake_by_ref();
}

/// Hands one backend session's output to the hub, line by line, tagged with
/// the backend and its session's epoch. When the session drops it (its
/// output ended) the hub is told the session closed.
pub(crate) struct ToHub {
    id: BackendId,
    epoch: u64,
    shared: Arc<Shared>,
}

impl ToHub {
    fn push(&self, mut state: MutexGuard<'_, State>, event: FromSession) {
        state.out.push_back(Input::Backend(
            self.id,
            Incoming::Session(self.epoch, event),
        ));
        drop(state);
        self.shared.marked();
    }
}

impl LineSink for ToHub {
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Gone>> {
        let mut state = self.shared.lock();
        if state.closed {
            return Poll::Ready(Err(Gone));
        }
        if state.out.len() < OUTBOX {
            return Poll::Ready(Ok(()));
        }
        if !state.blocked.iter().any(|w| w.will_wake(cx.waker())) {
            state.blocked.push(cx.waker().clone());
        }
        Poll::Pending
    }

    fn send(&mut self, msg: Message, spans: Option<Spans>) -> Result<(), Gone> {
        let state = self.shared.lock();
        if state.closed {
            return Err(Gone);
        }
        self.push(state, FromSession::Line(msg, spans));
        Ok(())
    }
}

impl Drop for ToHub {
    fn drop(&mut self) {
        let state = self.shared.lock();
        if !state.closed {
            self.push(state, FromSession::Closed);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use bytes::Bytes;
    use mcpvisor_session::writer::LineSink as _;
    use tokio::sync::{mpsc, oneshot};

    use super::*;

    /// The hub's task, as a waker that counts its wakes.
    #[derive(Default)]
    struct Hub(AtomicUsize);

    impl Wake for Hub {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn hub() -> (Arc<Hub>, Waker) {
        let hub = Arc::new(Hub::default());
        let waker = Waker::from(Arc::clone(&hub));
        (hub, waker)
    }

    fn line(input: Poll<Input>) -> String {
        match input {
            Poll::Ready(Input::Backend(_, Incoming::Session(_, FromSession::Line(line, _)))) => {
                String::from_utf8(line.to_bytes().to_vec()).expect("text")
            }
            Poll::Ready(Input::Backend(_, Incoming::Session(_, FromSession::Closed))) => {
                "closed".to_owned()
            }
            Poll::Ready(_) => "another input".to_owned(),
            Poll::Pending => "pending".to_owned(),
        }
    }

    /// A session that writes each line it is sent, until its input ends.
    fn echo(
        sessions: &Sessions,
        backend: u64,
    ) -> (
        mpsc::UnboundedSender<String>,
        impl Future<Output = ()> + use<>,
    ) {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let mut sink = sessions.sink(BackendId(backend), 1);
        let session = async move {
            while let Some(text) = rx.recv().await {
                std::future::poll_fn(|cx| sink.poll_ready(cx))
                    .await
                    .expect("the hub reads");
                sink.send(Message::Line(Bytes::from(text)), None)
                    .expect("taken");
            }
        };
        (tx, session)
    }

    #[tokio::test]
    async fn a_session_runs_in_the_pass_after_it_is_woken_and_its_lines_come_out_in_order() {
        let (hub, waker) = hub();
        let mut cx = Context::from_waker(&waker);
        let mut sessions = Sessions::default();
        let (tx, session) = echo(&sessions, 1);
        sessions.insert(BackendId(1), 1, session, Duration::from_secs(1));
        assert_eq!(line(sessions.poll_next(&mut cx)), "pending");
        // Woken outside a turn: the hub's task is woken too.
        let before = hub.0.load(Ordering::SeqCst);
        tx.send("a".into()).expect("open");
        assert_eq!(hub.0.load(Ordering::SeqCst), before + 1);
        // Woken inside a turn: only marked, and run by the next pass.
        sessions.enter();
        tx.send("b".into()).expect("open");
        assert_eq!(hub.0.load(Ordering::SeqCst), before + 1);
        assert_eq!(line(sessions.poll_next(&mut cx)), "a");
        assert!(sessions.has_output());
        assert_eq!(line(sessions.poll_next(&mut cx)), "b");
        assert!(!sessions.has_output());
        assert_eq!(line(sessions.poll_next(&mut cx)), "pending");
        // Its end is its last word.
        drop(tx);
        assert_eq!(line(sessions.poll_next(&mut cx)), "closed");
        assert_eq!(line(sessions.poll_next(&mut cx)), "pending");
        assert!(sessions.slots.iter().all(Option::is_none));
    }

    #[tokio::test]
    async fn a_session_waits_while_the_hub_is_a_whole_outbox_behind() {
        let (_hub, waker) = hub();
        let mut cx = Context::from_waker(&waker);
        let mut sessions = Sessions::default();
        let mut sink = sessions.sink(BackendId(1), 1);
        let writer = async move {
            for i in 0..OUTBOX + 2 {
                std::future::poll_fn(|cx| sink.poll_ready(cx))
                    .await
                    .expect("the hub reads");
                sink.send(Message::Line(Bytes::from(i.to_string())), None)
                    .expect("taken");
            }
        };
        sessions.insert(BackendId(1), 1, writer, Duration::from_secs(1));
        // The first pass runs it until the outbox is full.
        assert_eq!(line(sessions.poll_next(&mut cx)), "0");
        assert_eq!(sessions.shared.lock().out.len(), OUTBOX - 1);
        // It waited for room, and taking that line woke it.
        assert!(sessions.shared.lock().blocked.is_empty());
        assert_eq!(sessions.shared.lock().ready, vec![0]);
        // Each line taken lets it write one more, in the next pass.
        for i in 1..OUTBOX + 2 {
            assert_eq!(line(sessions.poll_next(&mut cx)), i.to_string());
            // At most a whole outbox, and its last word, that it closed.
            assert!(sessions.shared.lock().out.len() <= OUTBOX);
        }
        assert_eq!(line(sessions.poll_next(&mut cx)), "closed");
        assert_eq!(line(sessions.poll_next(&mut cx)), "pending");
    }

    #[tokio::test(start_paused = true)]
    async fn a_stop_that_outlasts_its_bound_drops_the_session() {
        let mut sessions = Sessions::default();
        let (ended_tx, ended) = oneshot::channel::<()>();
        let (shut_tx, mut shut) = oneshot::channel::<()>();
        let sink = sessions.sink(BackendId(1), 1);
        // A session that never ends, and tells when it is dropped.
        let stuck = async move {
            let _ended = ended_tx;
            let _sink = sink;
            std::future::pending::<()>().await;
        };
        sessions.insert(BackendId(1), 1, stuck, Duration::from_secs(5));
        let (quick_tx, quick_rx) = oneshot::channel::<()>();
        let quick = async move {
            let _ = quick_rx.await;
        };
        sessions.insert(BackendId(2), 1, quick, Duration::from_secs(5));
        sessions.stop(BackendId(1), 1, move || drop(shut_tx));
        assert!(
            matches!(shut.try_recv(), Err(oneshot::error::TryRecvError::Closed)),
            "shut was called"
        );
        drop(quick_tx);
        let started = tokio::time::Instant::now();
        sessions.finished().await;
        let took = started.elapsed();
        assert!(
            took >= Duration::from_secs(5) && took < Duration::from_secs(6),
            "{took:?}"
        );
        assert!(ended.await.is_err(), "the stuck session was dropped");
        assert!(sessions.slots.iter().all(Option::is_none));
    }

    #[tokio::test]
    async fn stopping_a_session_that_is_not_running_still_shuts_its_input() {
        let mut sessions = Sessions::default();
        let mut shut = false;
        sessions.stop(BackendId(9), 3, || shut = true);
        assert!(shut);
    }
}
