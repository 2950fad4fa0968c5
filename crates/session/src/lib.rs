//! The supervisor session: one stable client connection over replaceable
//! worker generations.
//!
//! # Theory of operation
//!
//! One task, [`Session::run`], owns every piece of lifecycle state: the
//! worker generations, the table of requests in flight, the queue of traffic
//! waiting for a ready worker, the client's handshake and all timers. Other
//! tasks only move bytes and report events to it over bounded channels:
//!
//! - the client's stdin is read in the session's own `select!`, framed by
//!   [`mcpvisor_jsonrpc::LineCodec`] (or, for a client in the same process,
//!   taken as whole lines from a channel: [`input::Lines`], with
//!   [`writer::LineSink`] for the way back);
//! - the session writes each pipe (client stdout, each worker's stdin) itself
//!   through a [`writer::Outlet`]: what it queues in a turn of its loop is
//!   written at the turn's end, once no complete line waits in what it has
//!   read, as one batch per pipe; a full pipe is waited on in the `select!`;
//! - each generation's stdout is read in the session's own `select!` too,
//!   turn by turn with the other generations' until it closes; each has an
//!   exit watcher task, and its stderr pump reports authorization prompts
//!   ([`WorkerReporter`]); their events carry the generation number, so a
//!   dead generation's output is fenced off by a single comparison.
//! - outlets are given messages whose id is to be replaced as the line read
//!   plus the new id ([`writer::Message`]), and put them together as they
//!   write: an id is changed without copying the message.

//!
//! Every client request gets a fresh integer id on the worker side, unique
//! across generations, so responses, cancellations and acknowledgements can
//! never be confused between generations or with mcpvisor's own requests (the
//! replayed `initialize`). Responses get the client's original id bytes back.
//! Server-to-client requests get fresh ids in the client's direction the same
//! way and remember which generation asked.//!
//! The session reports its own state changes (a generation starting, ready,
//! waiting for authorization, authorized, exited; the failed state entered
//! and left) as typed [`SessionEvent`]s to an [`EventSink`] its owner
//! provides. It never waits on that observer.

mod config;
mod events;
pub mod input;
pub mod queue;
mod reply;
mod session;
mod spawner;
mod table;
pub mod writer;

pub use config::{CancelAckPolicy, Config, GarbagePolicy};
pub use events::{EventSink, SessionEvent};
pub use mcpvisor_config::RestartMode;
pub use mcpvisor_config::report::{ErrorData, StderrTail};
pub use session::gate::Gate;
pub use session::{Control, Outcome, Session};
pub use spawner::{
    EnvSource, Preflight, ProcessSpawner, SpawnFailure, Spawner, StderrObserver, UnreadProbe,
    WorkerExit, WorkerIo, WorkerReporter,
};
