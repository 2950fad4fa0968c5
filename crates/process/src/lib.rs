//! Worker processes: spawning, process groups, layered stops and exits.
//!
//! # Theory of operation
//!
//! [`spawn`] starts a command in a process group of its own, with piped
//! stdin, stdout and stderr, and hands back the pipes together with a
//! [`Process`]: a cheap handle to a task that owns the child. That task is the
//! only code that waits on or signals the child. It reports the child's
//! [`Exit`] once, and on [`Process::stop`] it stops the child in layers: the
//! caller has closed stdin, so it first waits for a voluntary exit, then sends
//! SIGTERM to the whole group, waits again, then SIGKILL. After the leader is
//! gone, whatever is left in its group (the grandchildren that `npx` and `uvx`
//! start) is stopped the same way, so nothing outlives its worker.
//!
//! [`StdinProbe`] tells how much of what was written to a worker's stdin
//! no process will ever read, once none holds the pipe's read end.
//!
//! [`stderr::pump`] drains a worker's stderr line by line, passing it through
//! or discarding it, and keeps a bounded tail for crash reports.

mod exit;
mod group;
mod pipe;
pub mod stderr;

pub use exit::Exit;
pub use group::{Process, SpawnError, Spawned, Spec, StopTimeouts, Stopper, spawn};
pub use pipe::StdinProbe;
