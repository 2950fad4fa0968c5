//! A concurrent `bench/echo` load on one peer.
//!
//! Two halves run on the one thread, joined: the writer keeps `concurrency`
//! requests in flight (a semaphore holds the free slots) and, before writing
//! each request, tells the reader its id and send time; the reader owns the
//! table of requests in flight, matches each answer by id, checks its bytes,
//! records the latency and frees a slot. An answer for an id not in flight
//! (a duplicate or a stranger) or with another request's payload aborts the
//! run, and so does a request left unanswered for [`ANSWER_TIMEOUT`].

use std::collections::HashMap;
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader, BufWriter};
use tokio::process::{ChildStdin, ChildStdout};
use tokio::sync::{Semaphore, mpsc};
use tokio::time::Instant;

use crate::payload::{Answer, Payloads, Scratch};
use crate::peer::{ANSWER_TIMEOUT, Peer};
use crate::stats::Latencies;

/// When the writer stops sending.
#[derive(Debug, Clone, Copy)]
pub enum Stop {
    /// After this many requests.
    Count(u64),
    /// Once this long has passed since the first request.
    After(Duration),
}

/// One load: payload size, requests in flight, and its length.
#[derive(Debug, Clone, Copy)]
pub struct Load {
    pub payload: usize,
    pub concurrency: usize,
    pub stop: Stop,
}

/// What one load measured. Every request was answered exactly once with
/// its own payload, or the load failed.
#[derive(Debug)]
pub struct Outcome {
    pub requests: u64,
    /// From the first request sent to the last answer read.
    pub elapsed: Duration,
    pub latencies: Latencies,
}

/// The writer's note to the reader: request `id` left at `at`.
#[derive(Debug)]
struct Sent {
    id: u64,
    at: Instant,
}

/// Runs `load` on `peer` and checks every answer.
pub async fn run(peer: &mut Peer, load: Load, payloads: &Payloads) -> anyhow::Result<Outcome> {
    anyhow::ensure!(load.concurrency > 0, "concurrency must be at least 1");
    anyhow::ensure!(
        payloads.size() == load.payload.max(16),
        "payloads of the wrong size"
    );
    let slots = Semaphore::new(load.concurrency);
    // Unbounded, but never holds more than `concurrency` notes: each one
    // takes a slot that only the reader frees.
    let (tx, rx) = mpsc::unbounded_channel();
    let first_id = peer.next_id;
    let started = Instant::now();
    let writer = write_side(&mut peer.stdin, payloads, load, first_id, &slots, tx);
    let reader = read_side(&mut peer.stdout, payloads, &slots, rx);
    let (sent, (answered, last, latencies)) = match tokio::try_join!(writer, reader) {
        Ok(done) => done,
        Err(e) => {
            let note = peer.exit_note().await;
            return Err(e.context(format!("{:?} load failed; {note}", peer.via)));
        }
    };
    peer.next_id = first_id + sent;
    if answered != sent {
        bail!(
            "{:?}: {sent} requests sent but {answered} answered",
            peer.via
        );
    }
    Ok(Outcome {
        requests: answered,
        elapsed: last.unwrap_or(started) - started,
        latencies,
    })
}

async fn write_side(
    stdin: &mut BufWriter<ChildStdin>,
    payloads: &Payloads,
    load: Load,
    first_id: u64,
    slots: &Semaphore,
    tx: mpsc::UnboundedSender<Sent>,
) -> anyhow::Result<u64> {
    let (limit, deadline) = match load.stop {
        Stop::Count(n) => (n, None),
        Stop::After(d) => (u64::MAX, Some(Instant::now() + d)),
    };
    let mut scratch = Scratch::default();
    let mut sent = 0;
    while sent < limit {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
        let permit = match slots.try_acquire() {
            Ok(permit) => permit,
            Err(_) => {
                // Every slot is taken: send what is queued, then wait.
                stdin.flush().await.context("writing to the peer")?;
                let far = Instant::now() + Duration::from_secs(3600);
                tokio::select! {
                    permit = slots.acquire() => permit?,
                    () = tokio::time::sleep_until(deadline.unwrap_or(far)) => break,
                }
            }
        };
        permit.forget();
        let id = first_id + sent;
        tx.send(Sent {
            id,
            at: Instant::now(),
        })
        .map_err(|_| anyhow!("the reader stopped"))?;
        for part in payloads.request(id, &mut scratch) {
            stdin.write_all(part).await.context("writing to the peer")?;
        }
        sent += 1;
    }
    stdin.flush().await.context("writing to the peer")?;
    Ok(sent)
}

type ReadResult = (u64, Option<Instant>, Latencies);

async fn read_side(
    stdout: &mut BufReader<ChildStdout>,
    payloads: &Payloads,
    slots: &Semaphore,
    mut rx: mpsc::UnboundedReceiver<Sent>,
) -> anyhow::Result<ReadResult> {
    let mut in_flight: HashMap<u64, Instant> = HashMap::new();
    let mut latencies = Latencies::default();
    let mut answered = 0;
    let mut last = None;
    let mut writer_done = false;
    let mut line = Vec::with_capacity(payloads.size() + 256);
    loop {
        if writer_done && in_flight.is_empty() {
            return Ok((answered, last, latencies));
        }
        tokio::select! {
            biased;
            read = tokio::time::timeout(ANSWER_TIMEOUT, stdout.read_until(b'\n', &mut line)) => {
                // read_until keeps a partial line in `line` when the other
                // branch wins, so only a complete line is handled here.
                let n = read.map_err(|_| anyhow!(
                    "{} requests still unanswered after {ANSWER_TIMEOUT:?}",
                    in_flight.len()
                ))??;
                if n == 0 {
                    bail!("the peer closed its stdout with {} requests in flight", in_flight.len());
                }
                let now = Instant::now();
                let body = line.strip_suffix(b"\n").unwrap_or(&line);
                if let Answer::Echo(id) = payloads.check(body)? {
                    let at = match in_flight.remove(&id) {
                        Some(at) => at,
                        None => {
                            // Its note may still be queued.
                            while let Ok(sent) = rx.try_recv() {
                                in_flight.insert(sent.id, sent.at);
                            }
                            in_flight.remove(&id).ok_or_else(|| anyhow!(
                                "request {id} was answered but is not in flight \
                                 (answered twice, or never sent)"
                            ))?
                        }
                    };
                    latencies.push(now - at);
                    answered += 1;
                    last = Some(now);
                    slots.add_permits(1);
                }
                line.clear();
            }
            sent = rx.recv(), if !writer_done => match sent {
                Some(sent) => {
                    in_flight.insert(sent.id, sent.at);
                }
                None => writer_done = true,
            },
        }
    }
}
