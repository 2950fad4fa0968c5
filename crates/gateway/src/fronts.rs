//! How front connections talk to the hub.
//!
//! stdio has one front client; the Streamable HTTP front has one per
//! `Mcp-Session-Id` (and one per stateless request). Each front is opened
//! with a bounded channel on which the hub sends it what is for it, and
//! then hands the hub every message it receives, whole, as written. The hub
//! never waits on a front: a front whose channel is full is closed (its
//! requests are cancelled towards their servers), so one slow client never
//! stalls another.

use bytes::Bytes;
use tokio::sync::mpsc;

/// One front connection's identity for the life of the hub.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FrontId(pub u64);

/// What a front transport asks of the hub.
#[derive(Debug)]
pub enum FrontCommand {
    /// A new front connection; the hub sends what is for it on `out`.
    Open {
        front: FrontId,
        out: mpsc::Sender<Outbound>,
    },
    /// One JSON-RPC message the front's client sent, as written, with
    /// what the front's own scan read of it, when it scanned it whole
    /// (the hub then does not scan it again).
    Message {
        front: FrontId,
        line: Bytes,
        scan: Option<Box<mcpvisor_jsonrpc::Scanned>>,
    },
    /// The front connection ended (DELETE, expiry, a closed stream): its
    /// requests in flight are cancelled towards their servers, and its
    /// subscriptions end.
    Close { front: FrontId },
    /// The front's client has gone (a DELETE, a stateless request whose
    /// client closed the connection): its requests in flight are cancelled
    /// towards their servers at once.
    Abandon { front: FrontId },
}

/// A message for one front's client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outbound {
    /// One JSON-RPC message, compact, without a newline.
    pub line: Bytes,
    /// The client's request this message answers or belongs to (a
    /// response, its progress, a server request made while serving it), as
    /// the client wrote its id. `None` for what belongs to no request
    /// (list changes, log messages): Streamable HTTP sends those on the
    /// standalone stream.
    pub related: Option<Bytes>,
    /// `true` when the hub knows it is the response to `related`, so that
    /// the front need not read the line to know; `false` says nothing (the
    /// front reads the line).
    pub response: bool,
}

/// A front's messages go to a writer as they are; `related` only picks a
/// stream, which a single pipe does not have.
impl mcpvisor_session::writer::Outgoing for Outbound {
    fn parts(&self) -> [&[u8]; 3] {
        [&self.line, &[], &[]]
    }
}
