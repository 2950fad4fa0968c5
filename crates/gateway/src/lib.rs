//! The gateway: every configured server as one MCP server.
//!
//! # Theory of operation
//!
//! [`Hub::run`] is one owning task in front of many backends. Each backend
//! is the same supervised session `mcpvisor run` uses, started in-process
//! through [`mcpvisor_runner::Link`], so restarts, handshake replay,
//! fail-once, crash reports, secrets and bounds are inherited, not copied.
//! The gateway is each backend's client: it initializes every backend
//! itself, reads its lists, and routes the front client's traffic by the
//! names and URIs in the merged lists.
pub mod cache;
mod hub;
pub mod naming;
mod raw;
pub mod search;

pub use hub::{Control, Hub, Outcome, ServerPlan, Settings};
