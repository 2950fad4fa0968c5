//! Remote MCP servers over Streamable HTTP (or the old HTTP+SSE transport,
//! `legacy.rs`), supervised like local ones.
//!
//! # Theory of operation
//!
//! A remote server is a worker of the same [`mcpvisor_session::Session`]
//! that supervises a stdio server: [`RemoteSpawner`] is a
//! [`mcpvisor_session::Spawner`] whose generations are remote sessions
//! instead of processes. A generation's "stdin" and "stdout" are in-memory
//! pipes; its task POSTs each line the session writes and writes back, as
//! lines, what the server sends (a JSON body, or the events of an SSE
//! stream, byte for byte unless a message spans lines). So the session's
//! code does what it does for a process: it sends `initialize` (the
//! client's own, or its replay to a later generation), fails the requests
//! a generation held exactly once with `-32010` when it ends, restarts
//! with backoff, enters the failed state on a crash loop and reports
//! `SessionEvent`s; the gateway and the runner see no difference.
//!
//! A generation ends when its remote session is over: a 404 for its
//! `Mcp-Session-Id`, a 401 or 403, an `initialize` that fails, or a server
//! that cannot be reached (the standalone stream cannot be reopened, a POST
//! gets no answer). Its exit is an [`mcpvisor_config::HttpEnd`]: the HTTP
//! status (none when nothing answered) and the stage (`post`, `listen`,
//! `resume`), which reach `error.data.exit` and crash reports. The next
//! generation connects afresh, with its headers' `${VAR}` placeholders
//! filled again from the entry's env file.
//!
//! A generation first asks `server/discover` in the 2026-07-28 shape
//! (`modern.rs`); a server that offers that era is spoken to in it, with no
//! handshake, session or resumption; any other gets the `initialize` the
//! session sent.
//!
//! Within a generation, each request's answer is awaited by a task of its
//! own. A dropped SSE stream is resumed with `Last-Event-ID` (a few times,
//! with growing pauses, or the server's `retry`); only when that is not
//! possible (no event ids, the server refuses, the retries run out) is the
//! request answered by us, once, with `-32010` and the HTTP details in
//! `error.data`. An HTTP error for one request (a 400, a 500) answers that
//! request (`-32603`) and the session goes on. Header values are marked
//! sensitive and never logged; URLs are not logged either (a query may
//! carry a key).

mod exchange;
mod generation;
mod http;
mod legacy;
mod modern;
mod spawner;
mod sse;

pub use spawner::{RemoteError, RemoteSpawner};
