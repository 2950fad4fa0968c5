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

/// How long a connection may hold a stream before the server closes it
/// (2025-11-25 polling): the stream goes on, and the client resumes it with
/// `Last-Event-ID` after `retry`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Hold {
    pub after: Duration,
    pub retry: Duration,
}

/// What the body does next.
enum Step {
    /// `head` (a priming event), then `first`, then the queue.
    Open(Option<Bytes>, Option<Event>),
    Queue,
    Done,
}

/// An event-stream response of `head` (an already framed priming event),
/// `first`, and then the queue's events. It ends when the session drops
/// the queue's sender: after a response, or when the reader fell behind;
/// or, with a `hold`, once that has passed (after a `retry` field). A
/// comment every `keep_alive` makes a vanished client show up as a failed
/// write. `guard` is held until the stream ends.
pub(crate) fn response(
    head: Option<Bytes>,
    first: Option<Event>,
    rx: mpsc::Receiver<Event>,
    keep_alive: Duration,
    hold: Option<Hold>,
    guard: Option<InFlightGuard>,
) -> Response {
    let now = tokio::time::Instant::now();
    let tick = tokio::time::interval_at(now + keep_alive, keep_alive);
    let until = hold.map(|h| (now + h.after, h.retry));
    let state = (Step::Open(head, first), rx, tick, guard);
    let events =
        futures_util::stream::unfold(state, move |(step, mut rx, mut tick, guard)| async move {
            let chunk = match step {
                Step::Done => return None,
                Step::Open(Some(head), first) => {
                    return Some((
                        Ok::<_, Infallible>(head),
                        (Step::Open(None, first), rx, tick, guard),
                    ));
                }
                Step::Open(None, Some(ev)) => frame(&ev),
                Step::Open(None, None) | Step::Queue => {
                    let closing = async {
                        match until {
                            Some((at, _)) => tokio::time::sleep_until(at).await,
                            None => std::future::pending().await,
                        }
                    };
                    tokio::select! {
                        ev = rx.recv() => frame(&ev?),
                        _ = tick.tick() => Bytes::from_static(b": keep-alive\n\n"),
                        () = closing => {
                            let retry = until.map(|(_, r)| r).unwrap_or_default();
                            return Some((Ok(retry_field(retry)), (Step::Done, rx, tick, guard)));
                        }
                    }
                }
            };
            Some((Ok(chunk), (Step::Queue, rx, tick, guard)))
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

/// A priming event (2025-11-25): an event id with empty data, so that the
/// client can resume from the stream's start, and how long to wait before
/// reconnecting.
pub(crate) fn priming(id: &str, retry: Duration) -> Bytes {
    Bytes::from(format!(
        "id: {id}\nretry: {}\ndata: \n\n",
        retry.as_millis()
    ))
}

/// The event sent before the server closes a stream it will go on with.
fn retry_field(retry: Duration) -> Bytes {
    Bytes::from(format!("retry: {}\n\n", retry.as_millis()))
}

/// `id:` (unless it has none) and one `data:` line per line of the message (a compact message
/// has one).
pub(crate) fn frame(ev: &Event) -> Bytes {
    let mut out = BytesMut::with_capacity(ev.line.len() + ev.id.len() + 16);
    if !ev.id.is_empty() {
        out.put_slice(b"id: ");
        out.put_slice(ev.id.as_bytes());
        out.put_u8(b'\n');
    }
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
        assert_eq!(
            &priming("3-0", Duration::from_millis(500))[..],
            b"id: 3-0\nretry: 500\ndata: \n\n"
        );
    }
}
