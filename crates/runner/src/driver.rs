//! The connection's task: the one owner of the table of requests in flight.
//!
//! Callers never touch the table. They send the task a [`Command`] with a
//! oneshot for the answer; the task records the request, queues its line for
//! the session's input, and resolves the oneshot when the answer arrives, when
//! the line cannot be written, or when the session's output ends. So every
//! waiter is answered exactly once, and nothing is left behind by a send that
//! failed.
//!
//! The task also receives the session's status events: it keeps the
//! authorization link a generation waits on (published on a watch, so an
//! `initialize` waiting for its answer learns of it at once) and passes every
//! event on to whoever took the connection's event stream.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};

use bytes::Bytes;
use mcpvisor_jsonrpc::METHOD_NOT_FOUND;
use mcpvisor_session::SessionEvent;
use mcpvisor_session::queue::{LineSender, Permit};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot, watch};

use crate::connection::{CallError, Notification};

/// Where the answer to one request goes: the whole answer message.
pub(crate) type Reply = oneshot::Sender<Result<Value, CallError>>;

/// What a caller asks the connection's task to do.
#[derive(Debug)]
pub(crate) enum Command {
    /// Send request `id` (the line `msg`) and answer `reply` with its outcome.
    Request { id: u64, msg: Bytes, reply: Reply },
    /// Send a notification; `reply` learns whether it was queued.
    Notify {
        msg: Bytes,
        reply: oneshot::Sender<Result<(), CallError>>,
    },
    /// The caller stopped waiting for request `id` (its deadline passed):
    /// forget it and, if it was sent, tell the server.
    Cancel { id: u64 },
}

/// Most lines queued for the session's input; callers wait beyond that.
const OUTBOX: usize = 64;

/// The state the connection's task owns.
#[derive(Debug)]
pub(crate) struct Driver {
    /// Requests sent or queued, by id, with their waiters.
    waiting: HashMap<u64, Reply>,
    /// Lines for the session's input in order, each with the id of the
    /// request it is (if it is one).
    outbox: VecDeque<(Bytes, Option<u64>)>,
    /// The session's input queue; `None` once it is closed.
    out: Option<LineSender>,
    notes: mpsc::Sender<Notification>,
    /// Offered to the server when it asks for roots.
    roots: Option<PathBuf>,
    /// The authorization link the server waits on, and which generation
    /// printed it.
    auth: watch::Sender<Option<String>>,
    auth_generation: Option<u64>,
    /// The session's status events, passed on.
    observer: mpsc::Sender<SessionEvent>,
}

/// What the connection's task reports to its callers besides answers.
#[derive(Debug)]
pub(crate) struct Outputs {
    pub notes: mpsc::Sender<Notification>,
    pub auth: watch::Sender<Option<String>>,
    pub observer: mpsc::Sender<SessionEvent>,
}

impl Driver {
    pub(crate) fn new(out: LineSender, outputs: Outputs, roots: Option<PathBuf>) -> Self {
        Self {
            waiting: HashMap::new(),
            outbox: VecDeque::new(),
            out: Some(out),
            notes: outputs.notes,
            roots,
            auth: outputs.auth,
            auth_generation: None,
            observer: outputs.observer,
        }
    }

    /// Runs until the session's output ends, then answers every waiter
    /// with [`CallError::Closed`]. When every caller is gone, the session's
    /// input is closed once the queued lines are written, so the session
    /// ends too.
    pub(crate) async fn run(
        mut self,
        mut from: mpsc::Receiver<Bytes>,
        mut commands: mpsc::Receiver<Command>,
        mut events: mpsc::Receiver<SessionEvent>,
    ) {
        let mut callers = true;
        let mut session = true;
        loop {
            if !callers && self.outbox.is_empty() {
                self.out = None;
            }
            tokio::select! {
                permit = reserve(self.out.clone()), if !self.outbox.is_empty() => {
                    self.write(permit);
                }
                command = commands.recv(), if callers && self.outbox.len() < OUTBOX => {
                    match command {
                        Some(command) => self.on_command(command),
                        None => callers = false,
                    }
                }
                line = from.recv() => match line {
                    Some(line) => self.on_line(&line),
                    None => break,
                },
                event = events.recv(), if session => match event {
                    Some(event) => self.on_event(event),
                    None => session = false,
                },
            }
        }
        self.close();
    }

    pub(crate) fn on_command(&mut self, command: Command) {
        match command {
            Command::Request { id, msg, reply } => {
                if self.out.is_none() {
                    let _ = reply.send(Err(CallError::Closed));
                    return;
                }
                // Callers that went away without their answer (a dropped
                // future) leave a closed oneshot: forget those here.
                self.waiting.retain(|_, r| !r.is_closed());
                self.waiting.insert(id, reply);
                self.outbox.push_back((msg, Some(id)));
            }
            Command::Notify { msg, reply } => {
                let queued = if self.out.is_some() {
                    self.outbox.push_back((msg, None));
                    Ok(())
                } else {
                    Err(CallError::Closed)
                };
                let _ = reply.send(queued);
            }
            Command::Cancel { id } => {
                if self.waiting.remove(&id).is_none() {
                    return;
                }
                let unsent = self.outbox.len();
                self.outbox.retain(|(_, r)| *r != Some(id));
                if self.outbox.len() == unsent {
                    let note = json!({
                        "jsonrpc": "2.0",
                        "method": "notifications/cancelled",
                        "params": {"requestId": id, "reason": "timed out"},
                    });
                    self.outbox.push_back((Bytes::from(note.to_string()), None));
                }
            }
        }
    }

    /// Writes the first queued line, or, when the session's input is closed
    /// (`permit` is `None`), fails every queued request: none will be sent.
    pub(crate) fn write(&mut self, permit: Option<Permit>) {
        match permit {
            Some(permit) => {
                if let Some((msg, _)) = self.outbox.pop_front() {
                    permit.send((msg, None));
                }
            }
            None => {
                self.out = None;
                for (_, id) in std::mem::take(&mut self.outbox) {
                    if let Some(reply) = id.and_then(|id| self.waiting.remove(&id)) {
                        let _ = reply.send(Err(CallError::Closed));
                    }
                }
            }
        }
    }

    /// One line of the session's output: an answer goes to its waiter, a
    /// notification to the caller, and the server's own request is answered.
    pub(crate) fn on_line(&mut self, line: &[u8]) {
        let Ok(msg) = serde_json::from_slice::<Value>(line) else {
            return;
        };
        let method = msg.get("method").and_then(Value::as_str).map(str::to_owned);
        match (method, msg.get("id")) {
            (None, Some(id)) => {
                let waiter = id.as_u64().and_then(|id| self.waiting.remove(&id));
                if let Some(reply) = waiter {
                    let _ = reply.send(Ok(msg));
                }
            }
            (Some(method), None) => {
                let params = msg.get("params").cloned().unwrap_or(Value::Null);
                let _ = self.notes.try_send(Notification { method, params });
            }
            (Some(method), Some(id)) => {
                if self.out.is_some() {
                    let answer = answer_server(&method, id, self.roots.as_deref());
                    self.outbox
                        .push_back((Bytes::from(answer.to_string()), None));
                }
            }
            (None, None) => {}
        }
    }

    /// A status event from the session: track the authorization prompt, and
    /// pass the event on (dropped if nobody keeps up).
    pub(crate) fn on_event(&mut self, event: SessionEvent) {
        match &event {
            SessionEvent::AuthPending {
                generation, url, ..
            } => {
                self.auth_generation = Some(*generation);
                self.auth.send_replace(Some(url.clone()));
            }
            SessionEvent::Authorized { generation } | SessionEvent::Exited { generation, .. }
                if self.auth_generation == Some(*generation) =>
            {
                self.auth_generation = None;
                self.auth.send_replace(None);
            }
            _ => {}
        }
        let _ = self.observer.try_send(event);
    }

    /// The session's output ended: no answer will come.
    pub(crate) fn close(&mut self) {
        self.out = None;
        self.auth.send_replace(None);
        self.outbox.clear();
        for (_, reply) in self.waiting.drain() {
            let _ = reply.send(Err(CallError::Closed));
        }
    }

    /// Requests whose waiters have not been answered.
    #[cfg(test)]
    pub(crate) fn in_flight(&self) -> usize {
        self.waiting.len()
    }
}

/// Room for one line on the way to the session's input; `None` once it is
/// closed.
async fn reserve(out: Option<LineSender>) -> Option<Permit> {
    out?.reserve().await.ok()
}

fn answer_server(method: &str, id: &Value, roots: Option<&Path>) -> Value {
    match method {
        "ping" => json!({"jsonrpc": "2.0", "id": id, "result": {}}),
        "roots/list" => {
            let roots: Vec<Value> = roots
                .map(|dir| {
                    let name = dir
                        .file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default();
                    vec![json!({"uri": format!("file://{}", dir.display()), "name": name})]
                })
                .unwrap_or_default();
            json!({"jsonrpc": "2.0", "id": id, "result": {"roots": roots}})
        }
        _ => json!({"jsonrpc": "2.0", "id": id, "error": {
            "code": METHOD_NOT_FOUND,
            "message": format!("{method} is not supported by mcpvisor's command-line client"),
        }}),
    }
}

#[cfg(test)]
mod tests;
