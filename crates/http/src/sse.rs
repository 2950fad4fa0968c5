//! Server-sent events: a stream's queue as a response body.

use std::convert::Infallible;
use std::time::Duration;

use axum::body::Body;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::{BufMut, Bytes, BytesMut};
use tokio::sync::mpsc;

use crate::server::InFlightGuard;
use crate::session::Event;

/// An event-stream response of `first` and then the queue's events. It ends
/// when the session drops the queue's sender: after a response, or when the
/// reader fell behind. A comment every `keep_alive` makes a vanished client
/// show up as a failed write. `guard` is held until the stream ends.
pub(crate) fn response(
    first: Option<Event>,
    rx: mpsc::Receiver<Event>,
    keep_alive: Duration,
    guard: Option<InFlightGuard>,
) -> Response {
    let tick = tokio::time::interval_at(tokio::time::Instant::now() + keep_alive, keep_alive);
    let state = (first, rx, tick, guard);
    let events =
        futures_util::stream::unfold(state, |(first, mut rx, mut tick, guard)| async move {
            if let Some(ev) = first {
                return Some((Ok::<_, Infallible>(frame(&ev)), (None, rx, tick, guard)));
            }
            let chunk = tokio::select! {
                ev = rx.recv() => frame(&ev?),
                _ = tick.tick() => Bytes::from_static(b": keep-alive\n\n"),
            };
            Some((Ok(chunk), (None, rx, tick, guard)))
        });
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        Body::from_stream(events),
    )
        .into_response()
}

/// `id:` and one `data:` line per line of the message (a compact message
/// has one).
pub(crate) fn frame(ev: &Event) -> Bytes {
    let mut out = BytesMut::with_capacity(ev.line.len() + ev.id.len() + 16);
    out.put_slice(b"id: ");
    out.put_slice(ev.id.as_bytes());
    out.put_u8(b'\n');
    for line in ev.line.split(|b| *b == b'\n') {
        out.put_slice(b"data: ");
        out.put_slice(line.strip_suffix(b"\r").unwrap_or(line));
        out.put_u8(b'\n');
    }
    out.put_u8(b'\n');
    out.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames() {
        let ev = Event {
            id: "3-7".into(),
            line: Bytes::from_static(b"{\"a\":1}"),
            response: false,
        };
        assert_eq!(&frame(&ev)[..], b"id: 3-7\ndata: {\"a\":1}\n\n");
    }
}
