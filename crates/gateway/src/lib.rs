//! `mcpvisor serve`: every configured server offered to one client as one
//! MCP server.
//!
//! # Theory of operation
//!
//! The gateway reads a [`mcpvisor_config::ServerSet`] (several config files,
//! in config order) and runs each server behind its own supervising
//! session, exactly as `mcpvisor run` would: restarts, crash reports,
//! timeouts and reloads are the session's, one copy of the code. A server
//! that cannot start, crash-loops or waits on a person never delays or
//! breaks the others; its tools are simply not there (or answer with its
//! crash report) until it recovers.
//!
//! Toward the client the gateway is one server. Its lists are the union of
//! the backends' lists, each name prefixed with its server's name
//! (`github__search_repositories`); a call is routed by looking the
//! exposed name up, never by parsing it. The name `mcpvisor` is kept for
//! the gateway's own tools.
//!
//! This crate holds the pure parts of that, each tested on its own:
//!
//! * [`naming`]: exposed names that every client accepts
//!   (`^[A-Za-z0-9_-]{1,64}$`), the same from one run to the next and from
//!   one server to many, with collisions resolved deterministically and
//!   reported; a [`naming::NameTable`] maps both ways.
//! * [`search`]: the `--tool-search` mode, where the client sees a search
//!   tool instead of hundreds of tools: BM25 over names and descriptions.
//! * [`cache`]: the lists (and `initialize` result) of lazily started
//!   servers, kept on disk so that the gateway can answer `tools/list`
//!   without starting every server, keyed by what would change them.

pub mod cache;
pub mod naming;
pub mod search;
