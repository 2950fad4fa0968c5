//! Replacing one member's bytes inside a line and copying the rest.

use bytes::{BufMut, Bytes, BytesMut};

use crate::Raw;

/// Returns `line` with the bytes of `part` (which must borrow from `line`,
/// as every field of an [`crate::Envelope`] does) replaced by `with`.
///
/// # Panics
/// If `part` does not point into `line`: that is a bug in the caller.
pub fn splice(line: &[u8], part: Raw<'_>, with: &[u8]) -> Bytes {
    splice_at(line, span(line, part), with)
}

/// Returns `line` with the bytes in `at` replaced by `with`.
///
/// # Panics
/// If `at` does not lie in `line`: that is a bug in the caller.
pub fn splice_at(line: &[u8], at: std::ops::Range<usize>, with: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(line.len() - at.len() + with.len());
    out.put_slice(&line[..at.start]);
    out.put_slice(with);
    out.put_slice(&line[at.end..]);
    out.freeze()
}

/// Where the bytes of `part` (which must borrow from `line`) lie in `line`.
///
/// # Panics
/// If `part` does not point into `line`: that is a bug in the caller.
pub fn span(line: &[u8], part: Raw<'_>) -> std::ops::Range<usize> {
    let start = offset_of(line, part);
    start..start + part.get().len()
}

/// Where `part` (which must borrow from `line`) lies in `line`.
///
/// # Panics
/// If `part` does not point into `line`: that is a bug in the caller.
pub fn span_of(line: &[u8], part: &[u8]) -> std::ops::Range<usize> {
    let base = line.as_ptr() as usize;
    let at = part.as_ptr() as usize;
    assert!(
        at >= base && at + part.len() <= base + line.len(),
        "splice: the member does not borrow from the line"
    );
    at - base..at - base + part.len()
}

fn offset_of(line: &[u8], part: Raw<'_>) -> usize {
    span_of(line, part.get().as_bytes()).start
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Envelope;

    #[test]
    fn replaces_only_the_id() {
        let line = br#"{"result":{"id":7},"jsonrpc":"2.0", "id" : 7 }"#;
        let env = Envelope::peek(line).expect("envelope");
        let out = splice(line, env.id.expect("id"), b"\"client-1.0\"");
        assert_eq!(
            &out[..],
            br#"{"result":{"id":7},"jsonrpc":"2.0", "id" : "client-1.0" }"#
        );
    }

    #[test]
    fn replaces_a_params_member() {
        let line = br#"{"method":"notifications/cancelled","params":{"requestId":18446744073709551616,"reason":"r"}}"#;
        let env = Envelope::peek(line).expect("envelope");
        let out = splice(line, env.request_id.expect("request id"), b"12");
        assert_eq!(
            &out[..],
            br#"{"method":"notifications/cancelled","params":{"requestId":12,"reason":"r"}}"#
        );
    }
}
