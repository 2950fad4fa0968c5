//! The errors mcpvisor answers with. Each says what happened and what the
//! client may do next.

use bytes::Bytes;
use mcpvisor_config::redact;
use mcpvisor_config::report::ErrorData;
use mcpvisor_jsonrpc::{
    INVALID_REQUEST, NOT_STARTED, PARSE_ERROR, REQUEST_TIMEOUT, WORKER_LOST, build,
};

/// -32010: the worker went away with the request in flight.
pub(crate) fn lost(id: &[u8], loss: &ErrorData) -> Bytes {
    let message = format!(
        "The MCP server stopped before answering ({}{}). The request may or may not have taken \
         effect: inspect state before retrying a mutation. mcpvisor will serve the next request \
         with a fresh server process.",
        loss.reason,
        last_words(loss),
    );
    let message = redact::global().redact(&message);
    build::error(as_str(id), WORKER_LOST, &message, Some(&to_json(loss)))
}

/// -32011: the request was never sent to a worker. Without `data`,
/// `error.data` is just the reason.
pub(crate) fn not_started(id: &[u8], reason: &str, data: Option<ErrorData>) -> Bytes {
    let data = data.unwrap_or_else(|| ErrorData::reason(reason));
    let message = format!(
        "Request not started: {reason}{}. It is safe to retry.",
        last_words(&data)
    );
    let message = redact::global().redact(&message);
    build::error(as_str(id), NOT_STARTED, &message, Some(&to_json(&data)))
}

/// `; its last stderr line: ...` when `data` carries stderr: a person reads
/// the message first, and why a server died is most often there.
fn last_words(data: &ErrorData) -> String {
    data.last_stderr_line()
        .map(|line| format!("; its last stderr line: {line}"))
        .unwrap_or_default()
}

/// `error.data`, with every known secret replaced.
fn to_json(data: &ErrorData) -> serde_json::Value {
    // Plain strings and numbers: serializing cannot fail.
    serde_json::to_value(data.clone().redacted()).unwrap_or_default()
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
