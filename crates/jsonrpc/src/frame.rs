//! Bounded newline framing.
//!
//! One JSON-RPC message per line. The codec accepts `\n` and `\r\n`, skips
//! blank lines and a UTF-8 byte-order mark at the very start of the stream,
//! and never buffers more than `max_bytes` of a single line: past the limit it
//! keeps only a short head of the line (enough to find its `id`) and discards
//! the rest as it arrives, then yields one [`Frame::Oversize`].

use bytes::{Bytes, BytesMut};
use tokio_util::codec::Decoder;

/// How much of an oversize line is kept, so its `id` can still be found.
pub const OVERSIZE_HEAD: usize = 4096;

/// The most room made ahead of a line for it to be read in place (see
/// [`LineCodec::decode`]).
const READ_AHEAD: usize = 1 << 20;

const BOM: &[u8] = b"\xEF\xBB\xBF";

/// One unit read from a line-delimited stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// A complete line, without its terminator.
    Line(Bytes),
    /// A line longer than the limit. `len` counts every byte of the line
    /// (without its terminator); `head` is its first bytes.
    Oversize { len: usize, head: Bytes },
}

/// Line codec with a size bound.
#[derive(Debug)]
pub struct LineCodec {
    max_bytes: usize,
    /// Bytes of the buffer already searched for a newline.
    scanned: usize,
    /// Set while discarding the rest of an oversize line.
    discarding: Option<Discard>,
    at_start: bool,
    /// The last line's length with its terminator: the room to make ahead
    /// of the next one.
    last_len: usize,
}

#[derive(Debug)]
struct Discard {
    /// The first [`OVERSIZE_HEAD`] bytes of the line, filled as they arrive.
    head: Vec<u8>,
    len: usize,
    /// The last byte seen, to tell a `\r\n` terminator split across reads.
    last: u8,
}

impl Discard {
    fn keep(&mut self, bytes: &[u8]) {
        let room = OVERSIZE_HEAD.saturating_sub(self.head.len());
        self.head.extend_from_slice(&bytes[..room.min(bytes.len())]);
        self.len += bytes.len();
        if let Some(&b) = bytes.last() {
            self.last = b;
        }
    }
}

/// The stream failed underneath the codec.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

impl LineCodec {
    /// A codec that yields lines of at most `max_bytes` bytes.
    pub fn new(max_bytes: usize) -> Self {
        Self {
            max_bytes: max_bytes.max(1),
            scanned: 0,
            discarding: None,
            at_start: true,
            last_len: 0,
        }
    }

    fn strip_start(&mut self, buf: &mut BytesMut) -> bool {
        if !self.at_start {
            return true;
        }
        if buf.len() < BOM.len() && BOM.starts_with(buf) {
            // Could still be a BOM: wait for more bytes.
            return false;
        }
        if buf.starts_with(BOM) {
            let _ = buf.split_to(BOM.len());
        }
        self.at_start = false;
        true
    }
}

impl LineCodec {
    /// Whether `buf`, the buffer this codec decodes from, already holds a
    /// whole message: the next [`Decoder::decode`] yields a frame without
    /// another read. Blank lines, which decode skips, do not count.
    pub fn has_line(&self, buf: &[u8]) -> bool {
        if self.discarding.is_some() {
            return memchr::memchr(b'\n', buf).is_some();
        }
        let mut from = self.scanned.min(buf.len());
        if from == buf.len() {
            return false;
        }
        let mut start = 0;
        while let Some(offset) = memchr::memchr(b'\n', &buf[from..]) {
            let end = from + offset;
            let line = &buf[start..end];
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let line = match self.at_start && start == 0 {
                true => line.strip_prefix(BOM).unwrap_or(line),
                false => line,
            };
            if line.len() > self.max_bytes || !is_blank(line) {
                return true;
            }
            start = end + 1;
            from = start;
        }
        false
    }
}

fn trim_cr(mut line: BytesMut) -> BytesMut {
    if line.last() == Some(&b'\r') {
        line.truncate(line.len() - 1);
    }
    line
}

fn is_blank(line: &[u8]) -> bool {
    line.iter().all(|b| b.is_ascii_whitespace())
}

impl Decoder for LineCodec {
    type Item = Frame;
    type Error = FrameError;

    fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Frame>, FrameError> {
        if !self.strip_start(buf) {
            return Ok(None);
        }
        loop {
            if let Some(discard) = &mut self.discarding {
                match memchr::memchr(b'\n', buf) {
                    Some(pos) => {
                        let tail = buf.split_to(pos + 1);
                        discard.keep(&tail[..pos]);
                        // A `\r` before the newline belongs to the terminator.
                        let cr = discard.last == b'\r';
                        let mut len = discard.len;
                        if cr {
                            len -= 1;
                            if discard.head.len() == len + 1 {
                                discard.head.pop();
                            }
                        }
                        let head = Bytes::from(std::mem::take(&mut discard.head));
                        self.discarding = None;
                        return Ok(Some(Frame::Oversize { len, head }));
                    }
                    None => {
                        discard.keep(buf);
                        buf.clear();
                        return Ok(None);
                    }
                }
            }
            let from = self.scanned.min(buf.len());
            match memchr::memchr(b'\n', &buf[from..]) {
                Some(offset) => {
                    let pos = from + offset;
                    self.scanned = 0;
                    self.last_len = pos + 1;
                    let mut line = buf.split_to(pos + 1);
                    line.truncate(pos);
                    let line = trim_cr(line);
                    if line.len() > self.max_bytes {
                        let head = Bytes::copy_from_slice(&line[..OVERSIZE_HEAD.min(line.len())]);
                        return Ok(Some(Frame::Oversize {
                            len: line.len(),
                            head,
                        }));
                    }
                    if is_blank(&line) {
                        continue;
                    }
                    return Ok(Some(Frame::Line(line.freeze())));
                }
                None if buf.len() > self.max_bytes + 1 => {
                    // Over the limit with no end in sight: keep a head, drop the rest.
                    let mut discard = Discard {
                        head: Vec::with_capacity(OVERSIZE_HEAD),
                        len: 0,
                        last: 0,
                    };
                    discard.keep(buf);
                    self.discarding = Some(discard);
                    buf.clear();
                    self.scanned = 0;
                    return Ok(None);
                }
                None => {
                    self.scanned = buf.len();
                    // Room for a line as long as the last one before the
                    // reads that fill it: otherwise the buffer grows as they
                    // come, and each growth moves what was read so far (the
                    // caller only asks for one more byte). While the last
                    // line is still held elsewhere, this takes a new buffer
                    // and copies only what is read of this line so far
                    // (usually nothing).
                    let ahead = self.last_len.min(READ_AHEAD);
                    if ahead > buf.len() {
                        buf.reserve(ahead - buf.len());
                    }
                    return Ok(None);
                }
            }
        }
    }

    fn decode_eof(&mut self, buf: &mut BytesMut) -> Result<Option<Frame>, FrameError> {
        if let Some(frame) = self.decode(buf)? {
            return Ok(Some(frame));
        }
        // A last line without a terminator still counts.
        if let Some(mut discard) = self.discarding.take() {
            discard.keep(buf);
            buf.clear();
            return Ok(Some(Frame::Oversize {
                len: discard.len,
                head: Bytes::from(discard.head),
            }));
        }
        if buf.is_empty() || is_blank(buf) {
            buf.clear();
            return Ok(None);
        }
        self.scanned = 0;
        let line = trim_cr(buf.split());
        Ok(Some(Frame::Line(line.freeze())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_all(codec: &mut LineCodec, chunks: &[&[u8]]) -> Vec<Frame> {
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        for chunk in chunks {
            buf.extend_from_slice(chunk);
            while let Some(frame) = codec.decode(&mut buf).expect("decode") {
                out.push(frame);
            }
        }
        while let Some(frame) = codec.decode_eof(&mut buf).expect("decode_eof") {
            out.push(frame);
        }
        out
    }

    fn line(s: &str) -> Frame {
        Frame::Line(Bytes::copy_from_slice(s.as_bytes()))
    }

    #[test]
    fn splits_lines_and_handles_crlf_bom_and_blanks() {
        let mut codec = LineCodec::new(1024);
        let frames = decode_all(
            &mut codec,
            &[
                b"\xEF\xBB",
                b"\xBF{\"a\":1}\r\n\n  \r\n{\"b\"",
                b":2}\n{\"c\":3}",
            ],
        );
        assert_eq!(
            frames,
            vec![line("{\"a\":1}"), line("{\"b\":2}"), line("{\"c\":3}")]
        );
    }

    #[test]
    fn has_line_is_true_exactly_when_decode_yields_without_a_read() {
        let cases: &[&[u8]] = &[
            b"",
            b"{\"a\":1}",
            b"{\"a\":1}\n",
            b"\n\r\n  \n",
            b"\n \r\n{}\r\n",
            b"\xEF\xBB\xBF\n",
            b"\xEF\xBB\xBF{}\n",
            b"  \n{} partial",
        ];
        for case in cases {
            let mut codec = LineCodec::new(1024);
            let predicted = codec.has_line(case);
            let mut buf = BytesMut::from(*case);
            let decoded = codec.decode(&mut buf).expect("decode").is_some();
            assert_eq!(predicted, decoded, "{:?}", String::from_utf8_lossy(case));
        }
        // Past the limit, a line is an oversize frame, blank or not.
        let mut codec = LineCodec::new(2);
        assert!(codec.has_line(b"     \n"));
        let mut buf = BytesMut::from(&b"     \n"[..]);
        assert!(matches!(
            codec.decode(&mut buf).expect("decode"),
            Some(Frame::Oversize { .. })
        ));
    }

    #[test]
    fn bom_only_at_start() {
        let mut codec = LineCodec::new(1024);
        let frames = decode_all(&mut codec, &[b"x\n\xEF\xBB\xBFy\n"]);
        assert_eq!(frames[1], Frame::Line(Bytes::from_static(b"\xEF\xBB\xBFy")));
    }

    #[test]
    fn line_at_exact_limit_passes() {
        let mut codec = LineCodec::new(8);
        let frames = decode_all(&mut codec, &[b"12345678\n123456789\n"]);
        assert_eq!(frames[0], line("12345678"));
        assert!(matches!(&frames[1], Frame::Oversize { len: 9, .. }));
    }

    #[test]
    fn oversize_line_is_discarded_in_bounded_memory() {
        let mut codec = LineCodec::new(10_000);
        let mut buf = BytesMut::new();
        let mut frames = Vec::new();
        buf.extend_from_slice(b"{\"id\":7,\"x\":\"");
        for _ in 0..100 {
            buf.extend_from_slice(&[b'a'; 1000]);
            while let Some(f) = codec.decode(&mut buf).expect("decode") {
                frames.push(f);
            }
            assert!(buf.len() <= 10_002, "buffer grew to {}", buf.len());
        }
        buf.extend_from_slice(b"\"}\r\n{\"ok\":1}\n");
        while let Some(f) = codec.decode(&mut buf).expect("decode") {
            frames.push(f);
        }
        match &frames[0] {
            Frame::Oversize { len, head } => {
                assert_eq!(*len, 13 + 100_000 + 2);
                assert!(head.starts_with(b"{\"id\":7"));
                assert_eq!(head.len(), OVERSIZE_HEAD);
            }
            other => panic!("expected oversize, got {other:?}"),
        }
        assert_eq!(frames[1], line("{\"ok\":1}"));
    }

    /// Any way of cutting a stream into reads yields the same frames.
    #[test]
    fn frames_do_not_depend_on_how_reads_are_cut() {
        let mut stream = Vec::new();
        let mut want = Vec::new();
        for i in 0..200u32 {
            let body = "y".repeat((i as usize * 37) % 700);
            let line = format!("{{\"id\":{i},\"b\":\"{body}\"}}");
            if line.len() > 600 {
                want.push(Frame::Oversize {
                    len: line.len(),
                    head: Bytes::copy_from_slice(&line.as_bytes()[..OVERSIZE_HEAD.min(line.len())]),
                });
            } else {
                want.push(Frame::Line(Bytes::copy_from_slice(line.as_bytes())));
            }
            stream.extend_from_slice(line.as_bytes());
            stream.extend_from_slice(if i % 3 == 0 { b"\r\n" } else { b"\n" });
            if i % 17 == 0 {
                stream.extend_from_slice(b"\n  \n");
            }
        }
        let mut rng = fastrand::Rng::with_seed(0x9E37_79B9_7F4A_7C15);
        for _ in 0..50 {
            let mut chunks = Vec::new();
            let mut at = 0;
            while at < stream.len() {
                let n = rng.usize(1..=900);
                let end = (at + n).min(stream.len());
                chunks.push(&stream[at..end]);
                at = end;
            }
            let got = decode_all(&mut LineCodec::new(600), &chunks);
            let first_bad = got.iter().zip(&want).position(|(g, w)| g != w);
            assert!(
                got.len() == want.len() && first_bad.is_none(),
                "{} frames, {} expected; first difference at {first_bad:?}: {:?}",
                got.len(),
                want.len(),
                first_bad.map(|i| (&got[i], &want[i]))
            );
        }
    }

    /// While a line is read, room for one as long as the last is made
    /// first, so that it is read in place, not moved as the buffer grows.
    #[test]
    fn room_is_made_for_a_line_like_the_last_one() {
        let mut codec = LineCodec::new(4 << 20);
        let mut buf = BytesMut::new();
        let long = vec![b'x'; 100_000];
        buf.extend_from_slice(&long);
        buf.extend_from_slice(b"\n{");
        assert!(matches!(codec.decode(&mut buf), Ok(Some(Frame::Line(l))) if l.len() == 100_000));
        assert!(codec.decode(&mut buf).expect("decode").is_none());
        assert!(buf.capacity() >= 100_001, "capacity {}", buf.capacity());
        // A short line after it: the room follows the last line, not the longest.
        buf.extend_from_slice(b"}\n");
        assert!(codec.decode(&mut buf).expect("decode").is_some());
        let mut small = BytesMut::new();
        assert!(codec.decode(&mut small).expect("decode").is_none());
        assert!(small.capacity() < 1024, "capacity {}", small.capacity());
        // And never more than the bound, however long the last line.
        let mut codec = LineCodec::new(8 << 20);
        let mut buf = BytesMut::new();
        buf.extend_from_slice(&vec![b'y'; 3 << 20]);
        buf.extend_from_slice(b"\n");
        assert!(codec.decode(&mut buf).expect("decode").is_some());
        let mut next = BytesMut::new();
        assert!(codec.decode(&mut next).expect("decode").is_none());
        assert!(
            next.capacity() <= READ_AHEAD * 2,
            "capacity {}",
            next.capacity()
        );
        assert!(next.capacity() >= READ_AHEAD);
    }

    #[test]
    fn unterminated_last_line_is_yielded() {
        let mut codec = LineCodec::new(64);
        assert_eq!(
            decode_all(&mut codec, &[b"{}\n{\"z\":1}"]),
            vec![line("{}"), line("{\"z\":1}")]
        );
    }
}
