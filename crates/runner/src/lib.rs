//! Running a server and talking to it as a client: the base of `inspect`,
//! `call` and the gateway.
//!
//! # Theory of operation
//!
//! The runner does not drive a worker process itself. It starts the same
//! [`mcpvisor_session::Session`] that `mcpvisor run` uses, in-process, on a
//! [`Link`] (whole lines in over a bounded queue, whole lines out through a
//! [`mcpvisor_session::writer::LineSink`], no pipe between), and plays the
//! client on the other end: [`Connection`] here, each backend in the
//! gateway. So spawning
//! in a process group, framing, the handshake, timeouts, layered stops,
//! authorization prompts and crash reports are the session's code, not a
//! second copy: a crash reaches the runner as the session's `-32010` (or
//! `-32011`) error, whose `error.data` (an [`ErrorData`], the type the
//! session wrote) becomes a [`CrashReport`].
//!
//! [`Connection`] is the client end. One task owns it: the table of requests
//! in flight, the lines queued for the session, and what the session says
//! about itself. Callers send that task commands with a oneshot for the
//! answer, so every waiter is answered exactly once (with
//! [`CallError::Closed`] when the session goes away). The task hands
//! notifications (progress) to the caller, answers the server's own requests
//! (`roots/list` with the server's working directory, `ping`; sampling and
//! elicitation are declined), and passes on the session's [`SessionEvent`]s;
//! an authorization prompt among them gives `initialize` its longer wait. [`spawner`] turns a
//! [`mcpvisor_config::ServerDef`] into a spawner that reads the server's env
//! file again at every start: processes for a stdio server, Streamable HTTP
//! sessions ([`mcpvisor_remote`]) for a remote one, under the same session.
//! A stdio server with a `sandbox` runs through the binary's
//! `sandbox-exec` helper ([`set_sandbox_launcher`]), in a private
//! temporary directory, after a check that the kernel can apply it.

mod connection;
mod driver;
pub mod link;
mod sandbox;
mod spawner;

pub use connection::{CallError, Closer, Connection, InitInfo, Notification};
pub use link::{Inlet, Link, Running, SessionFuture, Unstarted};
pub use mcpvisor_config::CrashReport;
pub use mcpvisor_session::{ErrorData, SessionEvent};
pub use sandbox::set_sandbox_launcher;
pub use spawner::{ServerSpawner, ServerSpec, spawner};
