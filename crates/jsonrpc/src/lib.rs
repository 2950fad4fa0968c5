//! JSON-RPC on the MCP stdio wire, as mcpvisor needs it.
//!
//! # Theory of operation
//!
//! mcpvisor forwards the bytes it receives. It never builds a tree of a
//! message: [`frame::LineCodec`] cuts the byte stream into lines with a hard
//! size bound, and [`envelope::Envelope::peek`] borrows the few fields that
//! route a message (`id`, `method`, and the `params` members used for
//! cancellation and progress) straight out of the line as [`Raw`] text, in
//! one structural scan that also checks the line is JSON (`scan`; serde
//! for the rare lines the scan leaves to it, and for every error message). When an id must change on the way
//! through, [`rewrite::splice`] replaces exactly the bytes of the old id and
//! copies the rest of the line untouched. [`build`] makes the few messages
//! mcpvisor writes itself (errors, cancellations, replayed handshakes).

pub mod build;
#[cfg(feature = "differential")]
pub mod differential;
pub mod envelope;
pub mod era;
pub mod frame;
mod raw;
pub mod rewrite;
mod scan;

pub use envelope::{Envelope, EnvelopeError, Kind, Scanned, Spans};
pub use frame::{Frame, LineCodec};
pub use raw::Raw;

/// JSON-RPC: the line was not valid JSON.
pub const PARSE_ERROR: i64 = -32700;
/// JSON-RPC: the message was JSON but not a valid request.
pub const INVALID_REQUEST: i64 = -32600;
/// JSON-RPC: the method does not exist.
pub const METHOD_NOT_FOUND: i64 = -32601;
/// JSON-RPC: invalid method parameters.
pub const INVALID_PARAMS: i64 = -32602;
/// JSON-RPC: an internal error.
pub const INTERNAL_ERROR: i64 = -32603;
/// MCP SDKs' request-timeout code.
pub const REQUEST_TIMEOUT: i64 = -32001;
/// mcpvisor: the worker stopped while the request was in flight; the outcome
/// is uncertain. (Implementation-defined range: MCP reserves
/// -32020..-32099.)
pub const WORKER_LOST: i64 = -32010;
/// mcpvisor: the request was not started; it is safe to retry.
pub const NOT_STARTED: i64 = -32011;
