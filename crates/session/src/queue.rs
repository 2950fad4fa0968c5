//! The bounded queue an owner in the same process hands a session its
//! lines on ([`crate::input::Lines`] reads it).
//!
//! One lock over a `VecDeque`, the reader's waker and the counts. A line
//! taken is a lock, a pop and an unlock; a reader with nothing to take
//! leaves its waker and sleeps. tokio's bounded channel does the same with
//! more (a cooperative budget, a semaphore behind a second lock, a block
//! list): its send and its two receives of a gateway call at one in flight
//! cost about 930 instructions, these about 300 (BENCHMARKS.md).
//!
//! Semantics are those of tokio's bounded `mpsc` that it replaces: senders
//! are counted, and the reader sees the end (`None`) once every sender,
//! and every [`Permit`] (which holds one), is gone and the queue is empty;
//! once the reader is gone every send is refused; [`LineSender::reserve`]
//! waits for room and gives a permit that cannot fail to queue its line.

use std::collections::VecDeque;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::input::Line;

/// A queue holding at most `capacity` lines (at least one), queued or
/// reserved.
pub fn channel(capacity: usize) -> (LineSender, LineReceiver) {
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            lines: VecDeque::new(),
            reserved: 0,
            senders: 1,
            closed: false,
            reader: None,
        }),
        room: Notify::new(),
        capacity: capacity.max(1),
    });
    (
        LineSender {
            shared: Arc::clone(&shared),
        },
        LineReceiver { shared },
    )
}

#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    /// Notified when room is made while the queue was full, or it closed:
    /// a waiting [`LineSender::reserve`] looks again.
    room: Notify,
    capacity: usize,
}

/// Invariant: `lines.len() + reserved <= capacity`; once `closed`, `lines`
/// stays empty.
#[derive(Debug)]
struct State {
    lines: VecDeque<Line>,
    /// Permits given and not yet used or dropped.
    reserved: usize,
    /// Live senders, permits' included.
    senders: usize,
    /// The reader is gone.
    closed: bool,
    /// The reader's waker, left when it found nothing; taken by whoever
    /// gives it something to see (a line, the end).
    reader: Option<Waker>,
}

impl State {
    fn is_full(&self, capacity: usize) -> bool {
        self.lines.len() + self.reserved >= capacity
    }
}

/// Why [`LineSender::try_send`] refused a line (which is dropped).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("the queue is full")]
    Full,
    #[error("the reader is gone")]
    Closed,
}

/// The reader is gone: [`LineSender::reserve`] gives no permit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the reader is gone")]
pub struct Closed;

/// The sending side; cloned for more senders.
#[derive(Debug)]
pub struct LineSender {
    shared: Arc<Shared>,
}

impl Clone for LineSender {
    fn clone(&self) -> Self {
        self.shared.state.lock().senders += 1;
        Self {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl Drop for LineSender {
    fn drop(&mut self) {
        let reader = {
            let mut state = self.shared.state.lock();
            state.senders -= 1;
            if state.senders > 0 {
                return;
            }
            state.reader.take()
        };
        // The last one: the reader sees the end once it has taken the rest.
        if let Some(reader) = reader {
            reader.wake();
        }
    }
}

impl LineSender {
    /// Queues `line` if there is room, without waiting.
    pub fn try_send(&self, line: Line) -> Result<(), Refused> {
        let reader = {
            let mut state = self.shared.state.lock();
            if state.closed {
                return Err(Refused::Closed);
            }
            if state.is_full(self.shared.capacity) {
                return Err(Refused::Full);
            }
            state.lines.push_back(line);
            state.reader.take()
        };
        if let Some(reader) = reader {
            reader.wake();
        }
        Ok(())
    }

    /// Waits for room for one line and holds it: the permit queues its line
    /// without fail. Cancel-safe: dropped while it waits, it holds nothing.
    pub async fn reserve(self) -> Result<Permit, Closed> {
        // The wait borrows the queue; the sender moves into the permit.
        let shared = Arc::clone(&self.shared);
        let mut waited = false;
        loop {
            let notified = shared.room.notified();
            let mut notified = std::pin::pin!(notified);
            // Registered before the state is read: room made after the read
            // wakes this wait.
            notified.as_mut().enable();
            {
                let mut state = shared.state.lock();
                if state.closed {
                    return Err(Closed);
                }
                if !state.is_full(shared.capacity) {
                    state.reserved += 1;
                    let more = !state.is_full(shared.capacity);
                    drop(state);
                    // Room is made for one waiter at a time: one that got
                    // it passes on what is left.
                    if waited && more {
                        shared.room.notify_one();
                    }
                    return Ok(Permit { sender: Some(self) });
                }
            }
            notified.await;
            waited = true;
        }
    }
}

/// Room for one line, held by [`LineSender::reserve`].
#[derive(Debug)]
pub struct Permit {
    /// `None` once used.
    sender: Option<LineSender>,
}

impl Permit {
    /// Queues `line` in the room held (dropped if the reader has gone
    /// meanwhile, as nobody would read it).
    pub fn send(mut self, line: Line) {
        let Some(sender) = self.sender.take() else {
            return;
        };
        let reader = {
            let mut state = sender.shared.state.lock();
            state.reserved -= 1;
            if state.closed {
                return;
            }
            state.lines.push_back(line);
            state.reader.take()
        };
        if let Some(reader) = reader {
            reader.wake();
        }
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if let Some(sender) = self.sender.take() {
            sender.shared.state.lock().reserved -= 1;
            sender.shared.room.notify_one();
        }
    }
}

/// The reading side. Dropping it refuses every later send.
#[derive(Debug)]
pub struct LineReceiver {
    shared: Arc<Shared>,
}

impl Drop for LineReceiver {
    fn drop(&mut self) {
        let lines = {
            let mut state = self.shared.state.lock();
            state.closed = true;
            std::mem::take(&mut state.lines)
        };
        // Dropped outside the lock; and every waiting reservation learns.
        drop(lines);
        self.shared.room.notify_waiters();
    }
}

impl LineReceiver {
    /// The next line; `None` once every sender is gone and nothing is left.
    /// `Pending` leaves `cx`'s waker, woken by the next line or the end.
    pub fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<Line>> {
        let mut state = self.shared.state.lock();
        let was_full = state.is_full(self.shared.capacity);
        if let Some(line) = state.lines.pop_front() {
            drop(state);
            if was_full {
                self.shared.room.notify_one();
            }
            return Poll::Ready(Some(line));
        }
        if state.senders == 0 {
            return Poll::Ready(None);
        }
        match &state.reader {
            Some(waker) if waker.will_wake(cx.waker()) => {}
            _ => state.reader = Some(cx.waker().clone()),
        }
        Poll::Pending
    }

    /// [`LineReceiver::poll_recv`] as a future.
    pub async fn recv(&mut self) -> Option<Line> {
        std::future::poll_fn(|cx| self.poll_recv(cx)).await
    }

    /// Whether no line is queued.
    pub fn is_empty(&self) -> bool {
        self.shared.state.lock().lines.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use std::time::Duration;

    fn line(n: u8) -> Line {
        (Bytes::from(vec![n]), None)
    }

    fn first(l: Option<Line>) -> Option<u8> {
        l.map(|(b, _)| b[0])
    }

    #[tokio::test(start_paused = true)]
    async fn lines_come_in_order_until_full_then_the_end_once_every_sender_is_gone() {
        let (tx, mut rx) = channel(2);
        let other = tx.clone();
        assert_eq!(tx.try_send(line(1)), Ok(()));
        assert_eq!(other.try_send(line(2)), Ok(()));
        assert_eq!(tx.try_send(line(3)), Err(Refused::Full));
        assert!(!rx.is_empty());
        assert_eq!(first(rx.recv().await), Some(1));
        assert_eq!(tx.try_send(line(4)), Ok(()));
        drop(tx);
        assert_eq!(first(rx.recv().await), Some(2));
        drop(other);
        // The end comes after what was queued.
        assert_eq!(first(rx.recv().await), Some(4));
        assert!(rx.is_empty());
        assert_eq!(first(rx.recv().await), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiting_reader_is_woken_by_a_line_and_by_the_end() {
        let (tx, mut rx) = channel(4);
        let reader = tokio::spawn(async move {
            let got = first(rx.recv().await);
            let end = first(rx.recv().await);
            (got, end)
        });
        tokio::task::yield_now().await;
        tx.try_send(line(7)).expect("room");
        tokio::task::yield_now().await;
        drop(tx);
        let (got, end) = tokio::time::timeout(Duration::from_secs(5), reader)
            .await
            .expect("woken")
            .expect("joined");
        assert_eq!((got, end), (Some(7), None));
    }

    #[tokio::test(start_paused = true)]
    async fn a_reservation_waits_for_room_and_its_permit_queues_in_order() {
        let (tx, mut rx) = channel(1);
        tx.try_send(line(1)).expect("room");
        let waiting = tokio::spawn(tx.clone().reserve());
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "no room yet");
        // Room held by the permit counts: nothing else fits meanwhile.
        assert_eq!(first(rx.recv().await), Some(1));
        let permit = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("room made")
            .expect("joined")
            .expect("reader there");
        assert_eq!(tx.try_send(line(9)), Err(Refused::Full));
        permit.send(line(2));
        assert_eq!(first(rx.recv().await), Some(2));
        assert_eq!(tx.try_send(line(3)), Ok(()));
    }

    #[tokio::test(start_paused = true)]
    async fn room_made_once_reaches_each_waiting_reservation_in_turn() {
        let (tx, mut rx) = channel(2);
        tx.try_send(line(1)).expect("room");
        tx.try_send(line(2)).expect("room");
        let a = tokio::spawn(tx.clone().reserve());
        let b = tokio::spawn(tx.clone().reserve());
        tokio::task::yield_now().await;
        // Both lines taken: the first pop finds the queue full and wakes
        // one waiter, which passes the rest on.
        assert_eq!(first(rx.recv().await), Some(1));
        assert_eq!(first(rx.recv().await), Some(2));
        for waiter in [a, b] {
            let permit = tokio::time::timeout(Duration::from_secs(5), waiter)
                .await
                .expect("room reached it")
                .expect("joined")
                .expect("reader there");
            drop(permit);
        }
        // Dropped permits give their room back.
        assert_eq!(tx.try_send(line(3)), Ok(()));
        assert_eq!(tx.try_send(line(4)), Ok(()));
    }

    #[tokio::test(start_paused = true)]
    async fn a_permit_keeps_the_queue_open_and_a_gone_reader_refuses_everything() {
        let (tx, mut rx) = channel(2);
        let permit = tx.clone().reserve().await.expect("room");
        drop(tx);
        // A permit holds a sender: not the end yet.
        let reader = tokio::spawn(async move { (first(rx.recv().await), first(rx.recv().await)) });
        tokio::task::yield_now().await;
        permit.send(line(5));
        let got = tokio::time::timeout(Duration::from_secs(5), reader)
            .await
            .expect("woken")
            .expect("joined");
        assert_eq!(got, (Some(5), None));

        let (tx, rx) = channel(1);
        tx.try_send(line(1)).expect("room");
        let waiting = tokio::spawn(tx.clone().reserve());
        tokio::task::yield_now().await;
        drop(rx);
        let refused = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("woken by the close")
            .expect("joined");
        assert!(matches!(refused, Err(Closed)));
        assert_eq!(tx.try_send(line(2)), Err(Refused::Closed));
    }

    #[tokio::test(start_paused = true)]
    async fn a_cancelled_reservation_holds_no_room() {
        let (tx, mut rx) = channel(1);
        tx.try_send(line(1)).expect("room");
        let cancelled = tokio::time::timeout(Duration::from_millis(20), tx.clone().reserve()).await;
        assert!(cancelled.is_err(), "still waiting when cancelled");
        assert_eq!(first(rx.recv().await), Some(1));
        assert_eq!(tx.try_send(line(2)), Ok(()));
    }
}
