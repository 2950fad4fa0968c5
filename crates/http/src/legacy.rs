//! The HTTP+SSE transport of 2024-11-05, for clients that predate
//! Streamable HTTP.
//!
//! `GET /sse` opens a session and its one event stream, whose first event
//! (`endpoint`) names where to POST: `/messages?session_id=ID`. Each POSTed
//! message gets 202; everything for the client, responses included, comes
//! on the stream. The session ends when the stream's connection does (or
//! when its reader falls behind: this transport has no resumption). The
//! paths are fixed, as the reference SDKs serve them. Host, Origin and
//! token checks, size bounds and the session limit are those of the
//! Streamable HTTP endpoint.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use mcpvisor_gateway::fronts::FrontCommand;
use mcpvisor_jsonrpc::{Envelope, EnvelopeError};

use crate::server::{self, Shared};
use crate::session::Command;
use crate::sse;

/// Where an old client opens its stream.
pub(crate) const SSE_PATH: &str = "/sse";
/// Where it POSTs its messages, with `?session_id=`.
pub(crate) const MESSAGES_PATH: &str = "/messages";

/// `GET /sse`: a new session, its stream opened by the `endpoint` event.
pub(crate) async fn open(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    match open_inner(&shared, &headers).await {
        Ok(resp) | Err(resp) => resp,
    }
}

async fn open_inner(shared: &Arc<Shared>, headers: &HeaderMap) -> Result<Response, Response> {
    server::admit(shared, headers)?;
    if !server::accepts(headers).1 {
        return Err(server::error(
            StatusCode::NOT_ACCEPTABLE,
            None,
            "GET /sse opens an event stream: Accept must allow text/event-stream",
        ));
    }
    if shared.draining.is_cancelled() {
        return Err(server::draining(None));
    }
    let (key, _handle, events) = shared.open(true).await?;
    let Some(events) = events else {
        return Err(server::hub_unavailable());
    };
    let endpoint = Bytes::from(format!(
        "event: endpoint\ndata: {MESSAGES_PATH}?session_id={key}\n\n"
    ));
    let keep_alive = shared.cfg.cfg.keep_alive;
    Ok(sse::response(
        Some(endpoint),
        None,
        events,
        keep_alive,
        None,
        None,
    ))
}

/// `POST /messages?session_id=ID`: one message for the session's front.
pub(crate) async fn message(
    State(shared): State<Arc<Shared>>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Response {
    match message_inner(&shared, query.as_deref(), &headers, body).await {
        Ok(resp) | Err(resp) => resp,
    }
}

async fn message_inner(
    shared: &Arc<Shared>,
    query: Option<&str>,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, Response> {
    server::admit(shared, headers)?;
    // Session ids are hex: nothing in them is percent-encoded.
    let key = query.and_then(|q| {
        q.split('&')
            .find_map(|pair| pair.strip_prefix("session_id="))
    });
    let Some(key) = key else {
        return Err(server::error(
            StatusCode::BAD_REQUEST,
            None,
            "no session_id: open GET /sse first and POST to the endpoint it names",
        ));
    };
    let handle = shared.lookup(key).filter(|h| h.legacy).ok_or_else(|| {
        server::error(
            StatusCode::NOT_FOUND,
            None,
            "session not found (its stream ended): open GET /sse again",
        )
    })?;
    let line = server::read_body(shared, headers, body).await?;
    if let Err(e) = Envelope::peek(&line) {
        let code = match e {
            EnvelopeError::Json(_) => mcpvisor_jsonrpc::PARSE_ERROR,
            EnvelopeError::Batch | EnvelopeError::Invalid(_) => mcpvisor_jsonrpc::INVALID_REQUEST,
        };
        return Err(server::rpc_error(
            StatusCode::BAD_REQUEST,
            None,
            code,
            &e.to_string(),
        ));
    }
    if shared.draining.is_cancelled() {
        return Err(server::draining(None));
    }
    let _ = handle.commands.send(Command::Touch).await;
    let msg = FrontCommand::Message {
        front: handle.front,
        line,
        scan: None,
    };
    if shared.to_hub(msg).await {
        Ok((StatusCode::ACCEPTED, "Accepted").into_response())
    } else {
        Err(server::hub_unavailable())
    }
}
