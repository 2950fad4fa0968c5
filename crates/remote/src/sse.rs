//! A bounded `text/event-stream` parser.
//!
//! Fed the body's chunks as they come, it yields one [`Event`] per blank
//! line: its `data`, `id`, `retry` and `event` name (which only the old
//! HTTP+SSE transport uses); comments are skipped. An event whose data passes the bound is reported
//! as [`Event::oversize`] with its data dropped, and a line longer than the
//! bound is discarded as it streams by, so a server cannot make the parser
//! hold more than about one bound's worth of bytes.

use std::time::Duration;

use bytes::{Bytes, BytesMut};

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Event {
    /// The `data` lines joined with `\n`; empty for a priming event that
    /// carries only an id.
    pub data: Bytes,
    /// The `id` field, when the event set one.
    pub id: Option<String>,
    /// The `retry` field, when the event set one.
    pub retry: Option<Duration>,
    /// The `event` field, when the event set one (`None` means
    /// `message`).
    pub name: Option<String>,
    /// The data was over the bound and was dropped.
    pub oversize: bool,
}

/// The parser's state between chunks.
#[derive(Debug)]
pub(crate) struct Parser {
    max: usize,
    line: BytesMut,
    /// The current line is over the bound: skip to its end.
    skipping: bool,
    data: BytesMut,
    has_data: bool,
    id: Option<String>,
    retry: Option<Duration>,
    name: Option<String>,
    oversize: bool,
}

impl Parser {
    /// A parser for events whose data is at most `max` bytes.
    pub(crate) fn new(max: usize) -> Self {
        Self {
            max,
            line: BytesMut::new(),
            skipping: false,
            data: BytesMut::new(),
            has_data: false,
            id: None,
            retry: None,
            name: None,
            oversize: false,
        }
    }

    /// Feeds one chunk; the events it completes go to `emit`.
    pub(crate) fn feed(&mut self, mut chunk: &[u8], emit: &mut dyn FnMut(Event)) {
        while !chunk.is_empty() {
            let end = chunk.iter().position(|&b| b == b'\n');
            let (part, rest, complete) = match end {
                Some(at) => (&chunk[..at], &chunk[at + 1..], true),
                None => (chunk, &[][..], false),
            };
            chunk = rest;
            if !self.skipping {
                // Room for the field name ahead of a full-size value.
                if self.line.len() + part.len() > self.max + 64 {
                    self.skipping = true;
                    let head = if self.line.is_empty() {
                        part
                    } else {
                        &self.line[..]
                    };
                    self.oversize |= head.starts_with(b"data");
                    self.line.clear();
                } else {
                    self.line.extend_from_slice(part);
                }
            }
            if complete {
                if self.skipping {
                    self.skipping = false;
                } else {
                    let line = self.line.split().freeze();
                    self.line_done(&line, emit);
                }
            }
        }
    }

    fn line_done(&mut self, line: &[u8], emit: &mut dyn FnMut(Event)) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            self.dispatch(emit);
            return;
        }
        if line.starts_with(b":") {
            return;
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(at) => {
                let value = &line[at + 1..];
                (&line[..at], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &[][..]),
        };
        match field {
            b"data" => {
                if self.has_data {
                    self.data.extend_from_slice(b"\n");
                }
                self.has_data = true;
                if self.data.len() + value.len() > self.max {
                    self.oversize = true;
                    self.data.clear();
                } else if !self.oversize {
                    self.data.extend_from_slice(value);
                }
            }
            b"id" if !value.contains(&0) => {
                self.id = Some(String::from_utf8_lossy(value).into_owned());
            }
            b"event" => {
                self.name = Some(String::from_utf8_lossy(value).into_owned());
            }
            b"retry" => {
                if let Some(ms) = std::str::from_utf8(value)
                    .ok()
                    .and_then(|v| v.parse::<u64>().ok())
                {
                    self.retry = Some(Duration::from_millis(ms));
                }
            }
            _ => {}
        }
    }

    fn dispatch(&mut self, emit: &mut dyn FnMut(Event)) {
        let event = Event {
            data: if self.oversize {
                Bytes::new()
            } else {
                self.data.split().freeze()
            },
            id: self.id.take(),
            retry: self.retry.take(),
            name: self.name.take(),
            oversize: self.oversize,
        };
        self.data.clear();
        self.has_data = false;
        self.oversize = false;
        if !event.data.is_empty() || event.id.is_some() || event.retry.is_some() || event.oversize {
            emit(event);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(max: usize, chunks: &[&[u8]]) -> Vec<Event> {
        let mut parser = Parser::new(max);
        let mut events = Vec::new();
        for chunk in chunks {
            parser.feed(chunk, &mut |e| events.push(e));
        }
        events
    }

    #[test]
    fn events_across_chunks() {
        let events = parse(
            1024,
            &[
                b"id: 7\nda",
                b"ta: {\"a\":1}\r\n\r\n: comment\n",
                b"event: message\ndata:x\n\n",
            ],
        );
        assert_eq!(events.len(), 2);
        assert_eq!(events[0].id.as_deref(), Some("7"));
        assert_eq!(&events[0].data[..], br#"{"a":1}"#);
        assert_eq!(events[1].id, None);
        assert_eq!(&events[1].data[..], b"x");
        assert_eq!(events[0].name, None);
        assert_eq!(events[1].name.as_deref(), Some("message"));
    }

    #[test]
    fn an_event_name_belongs_to_its_own_event_only() {
        let events = parse(
            1024,
            &[b"event: endpoint
data: /messages?s=1

data: {}

"],
        );
        assert_eq!(events.len(), 2);
        assert_eq!(events[0].name.as_deref(), Some("endpoint"));
        assert_eq!(&events[0].data[..], b"/messages?s=1");
        assert_eq!(events[1].name, None);
    }

    #[test]
    fn multi_line_data_is_joined() {
        let events = parse(1024, &[b"data: {\ndata: \"a\": 1}\n\n"]);
        assert_eq!(&events[0].data[..], b"{\n\"a\": 1}");
    }

    #[test]
    fn a_priming_event_carries_its_id_and_retry() {
        let events = parse(1024, &[b"id: s-1\nretry: 1500\ndata:\n\n"]);
        assert_eq!(events[0].id.as_deref(), Some("s-1"));
        assert_eq!(events[0].retry, Some(Duration::from_millis(1500)));
        assert!(events[0].data.is_empty());
    }

    #[test]
    fn oversize_data_is_dropped_and_reported() {
        let big = vec![b'x'; 200];
        let mut chunk = b"id: 1\ndata: ".to_vec();
        chunk.extend_from_slice(&big);
        chunk.extend_from_slice(b"\n\ndata: ok\n\n");
        let events = parse(100, &[&chunk]);
        assert_eq!(events.len(), 2);
        assert!(events[0].oversize);
        assert!(events[0].data.is_empty());
        assert_eq!(events[0].id.as_deref(), Some("1"));
        assert_eq!(&events[1].data[..], b"ok");
        assert!(!events[1].oversize);
    }

    #[test]
    fn an_oversize_line_is_skipped_in_pieces() {
        let mut parser = Parser::new(10);
        let mut events = Vec::new();
        parser.feed(b"data: 0123456789", &mut |e| events.push(e));
        for _ in 0..100 {
            parser.feed(&[b'x'; 100], &mut |e| events.push(e));
        }
        assert!(parser.line.len() <= 10 + 64);
        parser.feed(b"\n\ndata: y\n\n", &mut |e| events.push(e));
        assert_eq!(events.len(), 2);
        assert!(events[0].oversize);
        assert_eq!(&events[1].data[..], b"y");
    }
}
