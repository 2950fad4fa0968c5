//! Writing pipes: an [`Outlet`] written by the task that owns the pipe's
//! traffic (the session's pipes, the gateway's stdio client), or one writer
//! task per pipe fed over a channel ([`write_lines`], for the pipes a
//! remote server's generation reads). An [`Outlet`] can also hand its
//! messages, one at a time, to a reader in the same process
//! ([`LineSink`]), a spliced one still in its pieces: a session run on the
//! runner's `Link` (a gateway backend's, the runner's own connection)
//! writes to its owner that way.
//!
//! A writer task's owner sends whole messages (without their newline)
//! into a bounded channel. The writer takes everything already queued, writes
//! it as one batch and flushes once, so a burst of small messages costs one
//! system call, not one each. A message is either a line as it was read or a
//! [`Message::Spliced`] one: the line read, with one member's bytes to be
//! replaced on the way out. The writer puts the pieces together as it
//! writes, so an id is changed without copying the message.

use std::future::Future as _;
use std::task::Poll;
use std::time::Duration;

use bytes::Bytes;
use mcpvisor_jsonrpc::Spans;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

/// Messages up to this size are copied into the batch buffer; larger ones are
/// written straight from their own buffer.
const BATCH_BYTES: usize = 64 * 1024;
/// A large message is written in pieces of this size, so the buffer a single
/// write is given stays bounded.
const PIECE: usize = 1024 * 1024;

/// Why a writer stopped before its channel closed.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("write made no progress for {0:?}")]
    Stalled(Duration),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

impl WriteError {
    /// The reader is gone (as opposed to slow).
    pub fn is_closed_pipe(&self) -> bool {
        matches!(self, WriteError::Io(e) if e.kind() == std::io::ErrorKind::BrokenPipe)
    }
}

/// A message for a pipe, without its newline.
#[derive(Debug, Clone)]
pub enum Message {
    /// Bytes written as they are.
    Line(Bytes),
    /// `line` with the bytes in `start..end` replaced by `with`.
    Spliced {
        line: Bytes,
        start: usize,
        end: usize,
        with: Piece,
    },
}

/// What replaces a member of a [`Message::Spliced`].
#[derive(Debug, Clone)]
pub enum Piece {
    /// Bytes taken from elsewhere (a client's id, borrowed from its request).
    Bytes(Bytes),
    /// An integer id, as its decimal digits.
    Number(Digits),
}

/// The decimal digits of a `u64`, kept inline.
#[derive(Clone, Copy)]
pub struct Digits {
    buf: [u8; 20],
    start: u8,
}

impl Digits {
    pub fn new(mut n: u64) -> Self {
        let mut buf = [0u8; 20];
        let mut at = buf.len();
        loop {
            at -= 1;
            buf[at] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        Self {
            buf,
            start: at as u8,
        }
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[usize::from(self.start)..]
    }
}

impl std::fmt::Debug for Digits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(std::str::from_utf8(self.as_bytes()).unwrap_or("?"))
    }
}

impl Piece {
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            Piece::Bytes(b) => b,
            Piece::Number(d) => d.as_bytes(),
        }
    }
}

impl Message {
    /// `line` with the bytes of `part` (which must borrow from `line`, as
    /// every member of an [`mcpvisor_jsonrpc::Envelope`] does) replaced by
    /// `with`.
    ///
    /// # Panics
    /// If `part` does not point into `line`: that is a bug in the caller.
    pub fn spliced(line: &Bytes, part: mcpvisor_jsonrpc::Raw<'_>, with: Piece) -> Self {
        let range = mcpvisor_jsonrpc::rewrite::span(line, part);
        Message::Spliced {
            line: line.clone(),
            start: range.start,
            end: range.end,
            with,
        }
    }

    /// The bytes to write, in order: up to three pieces.
    pub fn parts(&self) -> [&[u8]; 3] {
        match self {
            Message::Line(line) => [line, &[], &[]],
            Message::Spliced {
                line,
                start,
                end,
                with,
            } => [&line[..*start], with.as_bytes(), &line[*end..]],
        }
    }

    /// Its length in bytes (without the newline).
    pub fn len(&self) -> usize {
        self.parts().iter().map(|p| p.len()).sum()
    }

    /// Whether it has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Its bytes in one buffer (a copy when spliced).
    pub fn to_bytes(&self) -> Bytes {
        match self {
            Message::Line(line) => line.clone(),
            Message::Spliced { .. } => Bytes::from(self.parts().concat()),
        }
    }
}

impl From<Bytes> for Message {
    fn from(line: Bytes) -> Self {
        Message::Line(line)
    }
}

/// What a writer can be given: whole lines or [`Message`]s.
pub trait Outgoing: Send + 'static {
    /// The bytes to write, in order.
    fn parts(&self) -> [&[u8]; 3];
}

impl Outgoing for Bytes {
    fn parts(&self) -> [&[u8]; 3] {
        [self, &[], &[]]
    }
}

impl Outgoing for Message {
    fn parts(&self) -> [&[u8]; 3] {
        Message::parts(self)
    }
}

/// Writes every message from `rx` to `out`, newline-terminated, until the
/// channel closes (then flushes and returns `Ok`) or a write fails.
/// `stall` bounds each write; `None` waits as long as the reader needs.
pub async fn write_lines<W, M>(
    mut out: W,
    mut rx: mpsc::Receiver<M>,
    stall: Option<Duration>,
) -> Result<(), WriteError>
where
    W: AsyncWrite + Unpin,
    M: Outgoing,
{
    let mut batch = Batch {
        buf: Vec::with_capacity(BATCH_BYTES),
    };
    while let Some(first) = rx.recv().await {
        let mut next = Some(first);
        while let Some(msg) = next {
            batch.push(&mut out, msg.parts(), stall).await?;
            next = rx.try_recv().ok();
        }
        batch.write(&mut out, [&[], &[], &[]], stall).await?;
        bounded(stall, out.flush()).await?;
    }
    bounded(stall, out.flush()).await?;
    Ok(())
}

/// Small messages gathered for one write.
struct Batch {
    buf: Vec<u8>,
}

impl Batch {
    async fn push<W: AsyncWrite + Unpin>(
        &mut self,
        out: &mut W,
        parts: [&[u8]; 3],
        stall: Option<Duration>,
    ) -> Result<(), WriteError> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if len < BATCH_BYTES {
            for part in parts {
                self.buf.extend_from_slice(part);
            }
            self.buf.push(b'\n');
            if self.buf.len() >= BATCH_BYTES {
                self.write(out, [&[], &[], &[]], stall).await?;
            }
            return Ok(());
        }
        // A large message goes out with what is gathered, in one vectored
        // write, straight from its own buffers. Its newline goes out with
        // the next batch.
        self.write(out, parts, stall).await?;
        self.buf.push(b'\n');
        Ok(())
    }

    /// Writes what is gathered and then `large` (the pieces of the last
    /// message taken, when it is not copied into the buffer).
    async fn write<W: AsyncWrite + Unpin>(
        &mut self,
        out: &mut W,
        large: [&[u8]; 3],
        stall: Option<Duration>,
    ) -> Result<(), WriteError> {
        if self.buf.is_empty() && large.iter().all(|p| p.is_empty()) {
            return Ok(());
        }
        let [a, b, c] = large;
        put(out, [&self.buf, a, b, c], stall).await?;
        self.buf.clear();
        Ok(())
    }
}

/// Writes all of `parts` in order, with vectored writes of at most
/// [`PIECE`] bytes each, each bounded by `stall`.
async fn put<W: AsyncWrite + Unpin>(
    out: &mut W,
    parts: [&[u8]; 4],
    stall: Option<Duration>,
) -> Result<(), WriteError> {
    let total: usize = parts.iter().map(|p| p.len()).sum();
    let mut done = 0;
    while done < total {
        let mut slices = [std::io::IoSlice::new(&[]); 4];
        let count = gather(parts, done, &mut slices);
        match bounded(stall, out.write_vectored(&slices[..count])).await {
            Ok(0) => {
                let e = std::io::Error::from(std::io::ErrorKind::WriteZero);
                return Err(e.into());
            }
            Ok(n) => done += n,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// An in-process reader of an [`Outlet`]: it takes messages, without their
/// newline, one at a time, as a bounded channel does. A session whose
/// client is another task of the same process (the gateway's backends)
/// hands its messages over this way instead of through a pipe: no framing
/// on either side, no copy into a pipe buffer and out again, and a spliced
/// message not put together until its reader needs it whole.
pub trait LineSink: Send {
    /// Ready when one more line can be taken; `Err` once the reader is gone.
    fn poll_ready(&mut self, cx: &mut std::task::Context<'_>) -> Poll<Result<(), Gone>>;
    /// Takes one message, with where its envelope lies when the session
    /// knows (see [`Spans`]): in the message's line as it was read, before
    /// the splice of a [`Message::Spliced`]. A reader that wants the bytes
    /// whole has [`Message::to_bytes`]; one that rewrites the spliced
    /// member again can do it from the line as it was read, in one copy.
    /// Called only after [`LineSink::poll_ready`] was ready.
    fn send(&mut self, msg: Message, spans: Option<Spans>) -> Result<(), Gone>;
}

/// The reader of a [`LineSink`] is gone.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the reader of the session's output is gone")]
pub struct Gone;

impl From<Gone> for WriteError {
    fn from(_: Gone) -> Self {
        WriteError::Io(std::io::ErrorKind::BrokenPipe.into())
    }
}

/// Where an [`Outlet`] writes.
enum Out {
    Pipe(std::pin::Pin<Box<dyn AsyncWrite + Send>>),
    Lines(Box<dyn LineSink>),
}

/// A pipe written by the task that owns its traffic, without a writer task
/// between: the owner queues messages with [`Outlet::push`] and, when it has
/// nothing more to do for the moment, writes what is queued with
/// [`Outlet::poll_flush`] (a batch of small messages in one write, as
/// [`write_lines`] does). When the pipe is full the owner waits on
/// [`Outlet::flushed`] in its `select!`, which fails with
/// [`WriteError::Stalled`] once a write has made no progress for `stall`.
///
/// Writing from the owning task saves a writer task's wake-up, a channel
/// hop and the waker bookkeeping of both per message.
///
/// It knows how many of the messages it was given may have had a byte
/// written ([`Outlet::reached`]): every message past that count never
/// reached the reader.
pub struct Outlet {
    /// `None` once closed.
    out: Option<Out>,
    /// Each with its [`Spans`] when known, for a [`LineSink`].
    queue: std::collections::VecDeque<(Message, Option<Spans>)>,
    /// The batch being written: small messages copied in, each with its
    /// newline.
    buf: Vec<u8>,
    /// A large message (or one alone) written after `buf` from its own
    /// buffers, then its newline.
    large: Option<Message>,
    /// Bytes of the batch (`buf`, then `large` and its newline) written.
    done: usize,
    /// The batch is written but not yet flushed.
    unflushed: bool,
    stall: Option<Duration>,
    /// Armed when a write finds the pipe full; cleared by progress.
    stalled: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
    /// A write returned `Pending`: wait on [`Outlet::flushed`].
    blocked: bool,
    /// Messages before the batch, every one written whole.
    before: u64,
    /// Where each message of the batch starts in it.
    starts: Vec<usize>,
    /// Bytes written before the batch.
    base: u64,
    /// Where the last messages written whole (up to [`RECENT`], the last
    /// of `before`) start, counted in bytes from the first written: those
    /// that may still lie unread in the pipe.
    recent: std::collections::VecDeque<u64>,
}

/// How many messages written whole an [`Outlet`] remembers the place of.
/// Older ones count as read: at most a full queue of a worker's messages
/// is ever in its pipe.
const RECENT: usize = 1024;

impl std::fmt::Debug for Outlet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outlet")
            .field("queued", &self.queue.len())
            .field("blocked", &self.blocked)
            .finish_non_exhaustive()
    }
}

impl Outlet {
    pub fn new(out: std::pin::Pin<Box<dyn AsyncWrite + Send>>, stall: Option<Duration>) -> Self {
        Self::with(Out::Pipe(out), stall)
    }

    /// An outlet that hands each message to `sink` whole, as one line
    /// without its newline; it is blocked while `sink` has no room.
    pub fn lines(sink: Box<dyn LineSink>, stall: Option<Duration>) -> Self {
        Self::with(Out::Lines(sink), stall)
    }

    fn with(out: Out, stall: Option<Duration>) -> Self {
        Self {
            out: Some(out),
            queue: std::collections::VecDeque::new(),
            buf: Vec::new(),
            large: None,
            done: 0,
            unflushed: false,
            stall,
            stalled: None,
            blocked: false,
            before: 0,
            starts: Vec::new(),
            base: 0,
            recent: std::collections::VecDeque::new(),
        }
    }

    /// Queues a message; nothing is written until [`Outlet::poll_flush`].
    /// Dropped once closed.
    pub fn push(&mut self, msg: Message) {
        self.push_peeked(msg, None);
    }

    /// [`Outlet::push`], with where the message's envelope lies in its
    /// line as read (before its splice), for a [`LineSink`] to pass on; a
    /// pipe has no use for them.
    pub fn push_peeked(&mut self, msg: Message, spans: Option<Spans>) {
        if self.out.is_some() {
            self.queue.push_back((msg, spans));
        }
    }

    /// Whether it was closed.
    pub fn is_closed(&self) -> bool {
        self.out.is_none()
    }

    /// How many of the messages given so far may have had a byte written.
    /// Every message after those is never written once the outlet is
    /// closed.
    pub fn reached(&self) -> u64 {
        let done = self.done;
        self.before + self.starts.iter().filter(|start| **start < done).count() as u64
    }

    /// How many of the messages given so far the reader took a byte of,
    /// when the last `unread` bytes written are known never to be read
    /// (they lie in the pipe, and no process reads it any more). At most
    /// [`Outlet::reached`].
    pub fn read_of(&self, unread: u64) -> u64 {
        let written = self.base + self.done as u64;
        let read = written.saturating_sub(unread);
        let unread_whole = self
            .recent
            .iter()
            .rev()
            .take_while(|at| **at >= read)
            .count();
        let done = self.done;
        let in_batch = self
            .starts
            .iter()
            .filter(|start| **start < done && self.base + (**start as u64) < read)
            .count();
        self.before - unread_whole as u64 + in_batch as u64
    }

    /// Closes the pipe (the reader sees its end) and drops what was not
    /// written; returns [`Outlet::reached`].
    pub fn close(&mut self) -> u64 {
        self.close_unread(None)
    }

    /// [`Outlet::close`], when the last `unread` bytes written are known
    /// never to be read (see [`Outlet::read_of`]): returns how many
    /// messages the reader took a byte of.
    pub fn close_unread(&mut self, unread: Option<u64>) -> u64 {
        let reached = unread.map_or_else(|| self.reached(), |unread| self.read_of(unread));
        self.out = None;
        self.queue.clear();
        self.blocked = false;
        self.stalled = None;
        reached
    }

    /// Messages queued and not yet taken into a write.
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    /// Whether anything is queued or partly written.
    pub fn is_idle(&self) -> bool {
        self.out.is_none() || self.queue.is_empty() && !self.in_batch() && !self.unflushed
    }

    /// Whether the last write found the pipe full.
    pub fn is_blocked(&self) -> bool {
        self.blocked
    }

    fn in_batch(&self) -> bool {
        !self.buf.is_empty() || self.large.is_some()
    }

    /// Writes what is queued as far as the pipe takes it now, without
    /// waiting; `None` when the pipe is full (then [`Outlet::is_blocked`]).
    pub async fn write_now(&mut self) -> Option<Result<(), WriteError>> {
        std::future::poll_fn(|cx| Poll::Ready(self.write_now_in(cx))).await
    }

    /// [`Outlet::write_now`] from inside a poll: a pipe that is full wakes
    /// `cx`'s task once it has room.
    pub fn write_now_in(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> Option<Result<(), WriteError>> {
        match self.poll_flush(cx) {
            Poll::Pending => None,
            Poll::Ready(r) => Some(r),
        }
    }

    /// Resolves once everything queued is written and flushed (or the pipe
    /// failed or stalled).
    pub async fn flushed(&mut self) -> Result<(), WriteError> {
        std::future::poll_fn(|cx| self.poll_flush(cx)).await
    }

    /// Writes what is queued until it is all out (`Ready(Ok)`), the pipe is
    /// full (`Pending`, the task woken when it has room or the stall bound
    /// passes), or a write fails.
    pub fn poll_flush(&mut self, cx: &mut std::task::Context<'_>) -> Poll<Result<(), WriteError>> {
        if let Some(Out::Lines(_)) = self.out {
            return self.poll_hand_over(cx);
        }
        loop {
            if self.out.is_none() {
                return Poll::Ready(Ok(()));
            }
            if !self.in_batch() && !self.fill() {
                let Some(Out::Pipe(out)) = self.out.as_mut() else {
                    return Poll::Ready(Ok(()));
                };
                if self.unflushed {
                    match out.as_mut().poll_flush(cx) {
                        Poll::Ready(Ok(())) => self.unflushed = false,
                        Poll::Ready(Err(e)) => return Poll::Ready(Err(e.into())),
                        Poll::Pending => return self.wait(cx),
                    }
                }
                self.progressed();
                return Poll::Ready(Ok(()));
            }
            let mut slices = [std::io::IoSlice::new(&[]); 5];
            let count = {
                let [a, b, c] = match &self.large {
                    Some(msg) => msg.parts(),
                    None => [&[][..], &[], &[]],
                };
                let newline: &[u8] = if self.large.is_some() { b"\n" } else { &[] };
                gather([&self.buf, a, b, c, newline], self.done, &mut slices)
            };
            let Some(Out::Pipe(out)) = self.out.as_mut() else {
                return Poll::Ready(Ok(()));
            };
            match out.as_mut().poll_write_vectored(cx, &slices[..count]) {
                Poll::Ready(Ok(0)) => {
                    let e = std::io::Error::from(std::io::ErrorKind::WriteZero);
                    return Poll::Ready(Err(e.into()));
                }
                Poll::Ready(Ok(n)) => {
                    self.progressed();
                    self.done += n;
                    self.unflushed = true;
                    let total = self.buf.len() + self.large.as_ref().map_or(0, |m| m.len() + 1);
                    if self.done >= total {
                        self.before += self.starts.len() as u64;
                        for start in self.starts.drain(..) {
                            if self.recent.len() == RECENT {
                                self.recent.pop_front();
                            }
                            self.recent.push_back(self.base + start as u64);
                        }
                        self.base += total as u64;
                        self.buf.clear();
                        self.large = None;
                        self.done = 0;
                    }
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e.into())),
                Poll::Pending => return self.wait(cx),
            }
        }
    }

    /// [`Outlet::poll_flush`] for a [`LineSink`]: each queued message goes
    /// over whole, as one buffer (a spliced one is put together here).
    fn poll_hand_over(&mut self, cx: &mut std::task::Context<'_>) -> Poll<Result<(), WriteError>> {
        loop {
            let Some(Out::Lines(sink)) = self.out.as_mut() else {
                return Poll::Ready(Ok(()));
            };
            if self.queue.is_empty() {
                break;
            }
            match sink.poll_ready(cx) {
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(gone)) => return Poll::Ready(Err(gone.into())),
                Poll::Pending => return self.wait(cx),
            }
            let Some((msg, spans)) = self.queue.pop_front() else {
                break;
            };
            sink.send(msg, spans)?;
            self.before += 1;
        }
        self.progressed();
        Poll::Ready(Ok(()))
    }

    /// Takes queued messages into the batch; false when none is queued.
    fn fill(&mut self) -> bool {
        while let Some((msg, _)) = self.queue.pop_front() {
            self.starts.push(self.buf.len());
            // A large message, or one alone (the usual case, one call in
            // flight), is written from its own buffers, not copied.
            if msg.len() >= BATCH_BYTES || (self.buf.is_empty() && self.queue.is_empty()) {
                self.large = Some(msg);
                return true;
            }
            for part in msg.parts() {
                self.buf.extend_from_slice(part);
            }
            self.buf.push(b'\n');
            if self.buf.len() >= BATCH_BYTES {
                break;
            }
        }
        self.in_batch()
    }

    fn progressed(&mut self) {
        self.blocked = false;
        self.stalled = None;
    }

    /// The pipe is full: arm the stall bound (once per stall) and wait.
    fn wait(&mut self, cx: &mut std::task::Context<'_>) -> Poll<Result<(), WriteError>> {
        self.blocked = true;
        let Some(limit) = self.stall else {
            return Poll::Pending;
        };
        let timer = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(WriteError::Stalled(limit))),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// Up to [`PIECE`] bytes of `parts`, skipping the first `skip`, as slices;
/// returns how many of `slices` it filled.
fn gather<'a, const N: usize>(
    parts: [&'a [u8]; N],
    mut skip: usize,
    slices: &mut [std::io::IoSlice<'a>; N],
) -> usize {
    let mut count = 0;
    let mut room = PIECE;
    for part in parts {
        if skip >= part.len() {
            skip -= part.len();
            continue;
        }
        let rest = &part[skip..];
        skip = 0;
        let take = rest.len().min(room);
        slices[count] = std::io::IoSlice::new(&rest[..take]);
        count += 1;
        room -= take;
        if room == 0 {
            break;
        }
    }
    count
}

/// `io`, failed as stalled when it makes no progress for `stall`. The
/// bound is armed only when `io` does not complete at once: most writes to
/// a pipe with room do, and arming it reads the clock.
async fn bounded<T, F>(stall: Option<Duration>, io: F) -> Result<T, WriteError>
where
    F: std::future::Future<Output = std::io::Result<T>>,
{
    let mut io = std::pin::pin!(io);
    let Some(limit) = stall else {
        return Ok(io.await?);
    };
    let first = std::future::poll_fn(|cx| Poll::Ready(io.as_mut().poll(cx))).await;
    if let Poll::Ready(result) = first {
        return Ok(result?);
    }
    match tokio::time::timeout(limit, io).await {
        Ok(result) => Ok(result?),
        Err(_) => Err(WriteError::Stalled(limit)),
    }
}

/// A bounded channel's sender for a [`LineSink`]: a slot is taken at once
/// when the channel has room (`try_reserve_owned`), and only a full channel
/// is waited on, through tokio-util's `PollSender`, which sets up a
/// reservation future for every slot it takes.
#[derive(Debug)]
pub struct ChannelSlot<T: Send + 'static> {
    /// The sender, while no slot is held.
    sender: Option<mpsc::Sender<T>>,
    /// A slot taken at once, holding the sender.
    slot: Option<mpsc::OwnedPermit<T>>,
    /// The wait for room, used only when the channel was full; once it
    /// has started it is polled until it gives a slot.
    wait: tokio_util::sync::PollSender<T>,
    waiting: bool,
}

impl<T: Send + 'static> ChannelSlot<T> {
    pub fn new(sender: mpsc::Sender<T>) -> Self {
        Self {
            wait: tokio_util::sync::PollSender::new(sender.clone()),
            sender: Some(sender),
            slot: None,
            waiting: false,
        }
    }

    /// Ready once a slot is held; `Err` once the receiver is gone.
    pub fn poll_reserve(&mut self, cx: &mut std::task::Context<'_>) -> Poll<Result<(), Gone>> {
        if self.slot.is_some() {
            return Poll::Ready(Ok(()));
        }
        if !self.waiting {
            if let Some(sender) = self.sender.take() {
                match sender.try_reserve_owned() {
                    Ok(slot) => {
                        self.slot = Some(slot);
                        return Poll::Ready(Ok(()));
                    }
                    Err(mpsc::error::TrySendError::Full(sender)) => {
                        self.sender = Some(sender);
                        self.waiting = true;
                    }
                    Err(mpsc::error::TrySendError::Closed(sender)) => {
                        self.sender = Some(sender);
                        return Poll::Ready(Err(Gone));
                    }
                }
            }
        }
        self.wait.poll_reserve(cx).map_err(|_| Gone)
    }

    /// Sends `item` in the slot [`ChannelSlot::poll_reserve`] took.
    pub fn send(&mut self, item: T) -> Result<(), Gone> {
        if let Some(slot) = self.slot.take() {
            self.sender = Some(slot.send(item));
            return Ok(());
        }
        self.waiting = false;
        self.wait.send_item(item).map_err(|_| Gone)
    }

    /// The channel's sender (for a last message sent another way).
    pub fn sender(&self) -> Option<&mpsc::Sender<T>> {
        self.sender.as_ref().or_else(|| self.wait.get_ref())
    }
}

/// When a loop that reads a burst should hand on what it has queued and
/// let the other tasks run: after [`Slices::LEN`] turns in a row that each
/// left more input waiting. Without it, a burst crosses each task (and so
/// each process behind a pipe) whole, one after the other, and every one
/// waits while another works; with it, the next one starts on a burst's
/// first messages while the rest is read. Input that does not wait never
/// ends a slice, so a lone message costs nothing more.
#[derive(Debug, Default)]
pub struct Slices {
    in_a_row: u32,
}

impl Slices {
    /// Turns in a row, each leaving more input waiting, in one slice.
    /// Measured with `mcpvisor-bench` (`serve`, 64 B `tools/call` at
    /// concurrency 32): 0.46× direct without slices, 0.88× to 0.94× with
    /// slices of 8; 4, 6, 12 and 16 read no better.
    pub const LEN: u32 = 8;

    /// Counts a turn that left `more` input waiting (or none); `true`
    /// when a slice is done: the caller writes what it queued and yields.
    pub fn turn(&mut self, more: bool) -> bool {
        self.in_a_row = if more { self.in_a_row + 1 } else { 0 };
        if self.in_a_row >= Self::LEN {
            self.in_a_row = 0;
            return true;
        }
        false
    }
}

/// Turns in a row the first, or the second, branch of a loop's biased
/// `select!` may win before the branches after them are polled without
/// them once.
pub const STREAK: u32 = 16;

/// Which branch of a loop's biased `select!` gave a turn its input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Won {
    First,
    Second,
    Other,
}

/// Fairness for a loop whose `select!` polls its branches in a fixed
/// order, the likeliest first: polled every time, an input that is always
/// ready would starve the branches after it. Each of the first two
/// branches is held back for one pass once it has won [`STREAK`] turns in
/// a row (the second's streak counts across the first's turns, so that
/// the two cannot take turns starving the rest), and a last branch, ready
/// at once and enabled only then ([`Streaks::held`]), starts the streaks
/// again when nothing else was: a flood of a server's lines, or of a
/// client's, leaves every other input its turn.
#[derive(Debug, Default)]
pub struct Streaks {
    first: u32,
    second: u32,
}

impl Streaks {
    /// Whether the first branch is polled in this pass.
    pub fn first_open(&self) -> bool {
        self.first < STREAK
    }

    /// Whether the second branch is polled in this pass.
    pub fn second_open(&self) -> bool {
        self.second < STREAK
    }

    /// Whether a branch is held back in this pass.
    pub fn held(&self) -> bool {
        !self.first_open() || !self.second_open()
    }

    /// Counts the turn `won` gave.
    pub fn took(&mut self, won: Won) {
        match won {
            Won::First => self.first += 1,
            Won::Second => {
                self.first = 0;
                self.second += 1;
            }
            Won::Other => *self = Self::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    #[test]
    fn a_branch_that_always_wins_is_held_back_for_a_pass_after_a_streak() {
        let mut streaks = Streaks::default();
        for _ in 0..STREAK {
            assert!(!streaks.held());
            streaks.took(Won::First);
        }
        assert!(streaks.held() && !streaks.first_open() && streaks.second_open());
        // The second won the pass without the first: it is back.
        streaks.took(Won::Second);
        assert!(!streaks.held());
        for _ in 1..STREAK {
            streaks.took(Won::First);
            streaks.took(Won::Second);
        }
        assert!(streaks.held() && !streaks.second_open());
        streaks.took(Won::Other);
        assert!(!streaks.held() && streaks.first_open() && streaks.second_open());
    }

    #[tokio::test]
    async fn writes_lines_in_order_including_large_ones() {
        let (a, mut b) = tokio::io::duplex(1 << 20);
        let (tx, rx) = mpsc::channel(16);
        let task = tokio::spawn(write_lines(a, rx, None));
        let big = Bytes::from(vec![b'x'; 3 * PIECE + 5]);
        tx.send(Bytes::from_static(b"one")).await.expect("send");
        tx.send(big.clone()).await.expect("send");
        tx.send(Bytes::from_static(b"two")).await.expect("send");
        drop(tx);
        let mut got = Vec::new();
        b.read_to_end(&mut got).await.expect("read");
        task.await.expect("join").expect("write");
        let mut want = b"one\n".to_vec();
        want.extend_from_slice(&big);
        want.extend_from_slice(b"\ntwo\n");
        assert_eq!(got, want);
    }

    #[tokio::test]
    async fn spliced_messages_are_put_together_small_and_large() {
        let (a, mut b) = tokio::io::duplex(1 << 20);
        let (tx, rx) = mpsc::channel(16);
        let task = tokio::spawn(write_lines(a, rx, None));
        let small = Bytes::from_static(br#"{"id":"abc","result":1}"#);
        let mut big = br#"{"id":7,"result":""#.to_vec();
        big.extend(std::iter::repeat_n(b'y', 3 * PIECE));
        big.extend_from_slice(br#""}"#);
        let big = Bytes::from(big);
        for (line, with) in [
            (
                &small,
                Piece::Number(Digits::new(18_446_744_073_709_551_615)),
            ),
            (&big, Piece::Bytes(Bytes::from_static(b"\"client\""))),
            (&small, Piece::Number(Digits::new(0))),
        ] {
            let env = mcpvisor_jsonrpc::Envelope::peek(line).expect("envelope");
            let msg = Message::spliced(line, env.id.expect("id"), with);
            tx.send(msg).await.expect("send");
        }
        drop(tx);
        let mut got = Vec::new();
        b.read_to_end(&mut got).await.expect("read");
        task.await.expect("join").expect("write");
        let mut want = br#"{"id":18446744073709551615,"result":1}"#.to_vec();
        want.push(b'\n');
        want.extend_from_slice(&big[..6]);
        want.extend_from_slice(b"\"client\"");
        want.extend_from_slice(&big[7..]);
        want.push(b'\n');
        want.extend_from_slice(br#"{"id":0,"result":1}"#);
        want.push(b'\n');
        assert_eq!(got, want);
    }

    #[tokio::test]
    async fn an_outlet_writes_small_large_and_spliced_messages_in_order() {
        let (a, mut b) = tokio::io::duplex(1 << 20);
        let mut out = Outlet::new(Box::pin(a), None);
        let big = Bytes::from(vec![b'x'; 2 * PIECE + 3]);
        let small = Bytes::from_static(br#"{"id":"abc","result":1}"#);
        let env = mcpvisor_jsonrpc::Envelope::peek(&small).expect("envelope");
        out.push(Message::Line(Bytes::from_static(b"one")));
        out.push(Message::Line(big.clone()));
        out.push(Message::spliced(
            &small,
            env.id.expect("id"),
            Piece::Number(Digits::new(42)),
        ));
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            b.read_to_end(&mut got).await.expect("read");
            got
        });
        out.flushed().await.expect("written");
        assert!(out.is_idle());
        assert_eq!(out.reached(), 3);
        out.close();
        drop(out);
        let got = reader.await.expect("join");
        let mut want = b"one\n".to_vec();
        want.extend_from_slice(&big);
        want.extend_from_slice(b"\n{\"id\":42,\"result\":1}\n");
        assert_eq!(got, want);
    }

    #[tokio::test]
    async fn an_outlet_counts_as_read_only_messages_before_the_unread_bytes() {
        let (a, _b) = tokio::io::duplex(1 << 16);
        let mut out = Outlet::new(Box::pin(a), None);
        // Two batches: "aaaa\n" then "bb\n" and "ccc\n" (14 bytes in all).
        out.push(Message::Line(Bytes::from_static(b"aaaa")));
        out.flushed().await.expect("written");
        out.push(Message::Line(Bytes::from_static(b"bb")));
        out.push(Message::Line(Bytes::from_static(b"ccc")));
        out.flushed().await.expect("written");
        assert_eq!(out.reached(), 3);
        assert_eq!(out.read_of(0), 3);
        assert_eq!(out.read_of(4), 2, "\"ccc\\n\" was never read");
        assert_eq!(out.read_of(6), 2, "a byte of \"bb\\n\" was read");
        assert_eq!(out.read_of(7), 1);
        assert_eq!(out.read_of(14), 0);
        assert_eq!(out.read_of(1000), 0);
        assert_eq!(out.close_unread(Some(4)), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn an_outlet_counts_as_read_only_what_it_wrote_of_a_batch_cut_short() {
        // The pipe takes 8 bytes: all of "aaaa\n" and the start of
        // "bbbbbbbb\n"; the reader took none of them.
        let (a, _b) = tokio::io::duplex(8);
        let mut out = Outlet::new(Box::pin(a), Some(Duration::from_secs(5)));
        for msg in ["aaaa", "bbbbbbbb", "cc"] {
            out.push(Message::Line(Bytes::from_static(msg.as_bytes())));
        }
        assert!(out.write_now().await.is_none(), "the pipe is full");
        assert_eq!(out.read_of(8), 0);
        assert_eq!(out.read_of(3), 1, "only \"aaaa\\n\" was read");
        assert_eq!(out.read_of(0), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn an_outlet_counts_only_messages_a_byte_of_which_was_written_and_stalls() {
        // The pipe takes 8 bytes: all of "aaaa\n", the start of "bbbbbbbb\n",
        // nothing of "cc\n".
        let (a, _b) = tokio::io::duplex(8);
        let mut out = Outlet::new(Box::pin(a), Some(Duration::from_secs(5)));
        for msg in ["aaaa", "bbbbbbbb", "cc"] {
            out.push(Message::Line(Bytes::from_static(msg.as_bytes())));
        }
        assert!(out.write_now().await.is_none(), "the pipe is full");
        assert!(out.is_blocked());
        let err = out.flushed().await.expect_err("must stall");
        assert!(matches!(err, WriteError::Stalled(_)));
        assert_eq!(out.close(), 2);
        assert!(out.is_closed());
        out.push(Message::Line(Bytes::from_static(b"late")));
        assert!(out.is_idle(), "a closed outlet takes nothing more");
    }

    #[tokio::test(start_paused = true)]
    async fn a_stuck_reader_is_a_stall() {
        let (a, _b) = tokio::io::duplex(8);
        let (tx, rx) = mpsc::channel(4);
        tx.send(Bytes::from_static(b"more than eight bytes"))
            .await
            .expect("send");
        let err = write_lines(a, rx, Some(Duration::from_secs(5)))
            .await
            .expect_err("must stall");
        assert!(matches!(err, WriteError::Stalled(_)));
    }

    #[test]
    fn a_slice_ends_after_its_length_of_turns_with_more_waiting() {
        let mut slices = Slices::default();
        // Input that does not wait never ends a slice.
        assert!((0..100).all(|_| !slices.turn(false)));
        // A run of waiting turns ends one slice per LEN turns.
        let ends = (0..3 * Slices::LEN).filter(|_| slices.turn(true)).count();
        assert_eq!(ends, 3);
        // A turn with nothing waiting starts the count again.
        for _ in 1..Slices::LEN {
            assert!(!slices.turn(true));
        }
        assert!(!slices.turn(false));
        for _ in 1..Slices::LEN {
            assert!(!slices.turn(true));
        }
        assert!(slices.turn(true));
    }

    /// One poll of the slot: `None` when it would wait.
    async fn ready(slot: &mut ChannelSlot<u32>) -> Option<Result<(), Gone>> {
        std::future::poll_fn(|cx| match slot.poll_reserve(cx) {
            Poll::Pending => Poll::Ready(None),
            Poll::Ready(r) => Poll::Ready(Some(r)),
        })
        .await
    }

    #[tokio::test]
    async fn a_channel_slot_sends_in_order_waits_when_full_and_sees_its_receiver_go() {
        let (tx, mut rx) = mpsc::channel(2);
        let mut slot = ChannelSlot::new(tx);
        for n in [1, 2] {
            assert!(matches!(ready(&mut slot).await, Some(Ok(()))));
            slot.send(n).expect("sent");
        }
        // Full: no slot until the receiver takes one.
        assert!(ready(&mut slot).await.is_none());
        assert!(ready(&mut slot).await.is_none(), "still waiting");
        assert_eq!(rx.recv().await, Some(1));
        assert!(matches!(ready(&mut slot).await, Some(Ok(()))));
        slot.send(3).expect("sent");
        // Back to taking slots at once.
        assert_eq!(rx.recv().await, Some(2));
        assert!(matches!(ready(&mut slot).await, Some(Ok(()))));
        slot.send(4).expect("sent");
        assert_eq!(rx.recv().await, Some(3));
        assert_eq!(rx.recv().await, Some(4));
        assert!(slot.sender().is_some());
        drop(rx);
        assert!(matches!(ready(&mut slot).await, Some(Err(Gone))));
    }
}
