//! `mcpvisor serve`: every configured server offered to one client as one
//! MCP server.
//!
//! # Theory of operation
//!
//! The gateway reads a [`mcpvisor_config::ServerSet`] (several config files,
//! in config order) and runs each server behind its own supervising
//! session, exactly as `mcpvisor run` would, started in-process through
//! [`mcpvisor_runner::Link`]: restarts, handshake replay, fail-once, crash
//! reports, secrets, timeouts and reloads are the session's, one copy of the
//! code. A server that cannot start, crash-loops or waits on a person never
//! delays or breaks the others; its tools are simply not there (or answer
//! with its crash report) until it recovers.
//!
//! [`Hub::run`] is the one owning task. It is each backend's client: it
//! initializes every backend itself with one fixed set of client
//! capabilities, reads its lists, and keeps the merged lists and routing
//! tables. Toward the front client it is one server. Its lists are the
//! union of the backends' lists, each name prefixed with its server's name
//! (`github__search_repositories`); a call is routed by looking the
//! exposed name up, never by parsing it. The name `mcpvisor` is kept for
//! the gateway's own tools. On stdio it reads and writes the client's pipes
//! in its own loop, as `run`'s session does; HTTP sessions reach it over
//! [`fronts`]' channels; each backend's session is handed whole lines over
//! channels, with no pipe in between.
//!
//! The pure parts are modules of their own, each tested on its own:
//!
//! * [`naming`]: exposed names that every client accepts
//!   (`^[A-Za-z0-9_-]{1,64}$`), the same from one run to the next and from
//!   one server to many, with collisions resolved deterministically and
//!   reported; a [`naming::NameTable`] maps both ways.
//! * [`search`]: BM25 ranking of tools for `--tool-search`.
//! * [`cache`]: the list cache that lets a lazy server's tools be listed
//!   before it ever starts.
//! * [`audit`]: the audit trail of calls, prompt gets and resource reads,
//!   its file written by a thread of its own behind a bounded queue.
//! * `overrides`: an entry's own titles, descriptions and annotations for
//!   its server's tools, applied as a backend's `tools/list` is taken in.
//! * [`pins`]: the approved definitions of each server's tools, prompts
//!   and resource templates, and the store that keeps them; the hub holds
//!   back a definition that differs from the approved one until a person
//!   approves it.

pub mod audit;
pub mod cache;
pub mod fronts;
mod hub;
pub mod monitor;
pub mod naming;
mod overrides;
pub mod pins;
mod raw;
pub mod search;

#[doc(hidden)]
pub use hub::Spawners;
pub use hub::{
    Cached, Control, Hub, Outcome, ReloadCause, ServerPlan, Settings, check_replica_id,
    random_replica_id,
};
