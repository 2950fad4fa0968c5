//! The errors mcpvisor answers with. Each says what happened and what the
//! client may do next.

use bytes::Bytes;
use mcpvisor_jsonrpc::{
    INVALID_REQUEST, NOT_STARTED, PARSE_ERROR, REQUEST_TIMEOUT, WORKER_LOST, build,
};
use serde_json::json;

/// Why a generation stopped, for the errors of the requests it held.
#[derive(Debug, Clone)]
pub(crate) struct Loss {
    pub generation: u64,
    pub cause: String,
    pub phase: &'static str,
    pub exit: Option<mcpvisor_process::ExitStatus>,
    /// The worker's last stderr lines, only with --stderr-in-errors.
    pub stderr: Option<Vec<String>>,
    /// How long the worker ran.
    pub uptime: std::time::Duration,
}

impl Loss {
    pub fn data(&self) -> serde_json::Value {
        let exit = match self.exit {
            Some(mcpvisor_process::ExitStatus::Code(c)) => json!({"code": c}),
            Some(mcpvisor_process::ExitStatus::Signal(s)) => json!({"signal": s}),
            None => serde_json::Value::Null,
        };
        let mut data = json!({
            "generation": self.generation,
            "reason": self.cause,
            "phase": self.phase,
            "exit": exit,
            "uptime_ms": u64::try_from(self.uptime.as_millis()).unwrap_or(u64::MAX),
        });
        if let Some(lines) = &self.stderr {
            data["stderr"] = json!(lines);
        }
        data
    }
}

/// -32010: the worker went away with the request in flight.
pub(crate) fn lost(id: &[u8], loss: &Loss) -> Bytes {
    let message = format!(
        "The MCP server stopped before answering ({}). The request may or may not have taken \
         effect: inspect state before retrying a mutation. mcpvisor will serve the next request \
         with a fresh server process.",
        loss.cause
    );
    build::error(as_str(id), WORKER_LOST, &message, Some(&loss.data()))
}

/// -32011: the request was never sent to a worker.
pub(crate) fn not_started(id: &[u8], reason: &str, data: Option<serde_json::Value>) -> Bytes {
    let message = format!("Request not started: {reason}. It is safe to retry.");
    let data = data.unwrap_or_else(|| json!({ "reason": reason }));
    build::error(as_str(id), NOT_STARTED, &message, Some(&data))
}

/// The client's request ran out of time.
pub(crate) fn timed_out(id: &[u8], after: std::time::Duration, ceiling: bool) -> Bytes {
    let why = if ceiling {
        format!("it ran longer than the ceiling of {after:?}")
    } else {
        format!("no answer or progress from the server for {after:?}")
    };
    let message = format!(
        "Request timed out: {why}. The server was sent notifications/cancelled. The outcome is \
         uncertain: inspect state before retrying a mutation."
    );
    build::error(as_str(id), REQUEST_TIMEOUT, &message, None)
}

pub(crate) fn parse_error(detail: &str) -> Bytes {
    build::error("null", PARSE_ERROR, &format!("Parse error: {detail}"), None)
}

pub(crate) fn invalid(id: &str, detail: &str) -> Bytes {
    build::error(
        id,
        INVALID_REQUEST,
        &format!("Invalid request: {detail}"),
        None,
    )
}

fn as_str(id: &[u8]) -> &str {
    // Ids are stored exactly as they arrived inside valid JSON.
    std::str::from_utf8(id).unwrap_or("null")
}
