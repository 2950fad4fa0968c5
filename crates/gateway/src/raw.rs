//! Editing one member of a JSON object while keeping every other byte.
//!
//! The gateway renames tools and prompts and rewrites a progress token on
//! the way through. Everything else in the message (arguments, schemas,
//! `_meta`, unknown fields) must reach the other side as it came, so objects
//! are read as an ordered list of `(key, raw value)` pairs and written back
//! in the same order with only the named member replaced.
//!
//! A member's value is kept as the text it was read from, already checked
//! as JSON by that read, not as a [`RawValue`]: borrowing one means checking
//! the text again.

use std::borrow::Cow;
use std::fmt;

use mcpvisor_jsonrpc::Raw;
use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

/// A JSON object as its members, in order, with raw values.
#[derive(Debug, Default)]
pub(crate) struct RawObject<'a> {
    members: Vec<(Cow<'a, str>, Raw<'a>)>,
}

impl<'a> RawObject<'a> {
    /// Reads `text` as an object. `None` when it is not one.
    ///
    /// The structural scan that reads messages reads it, in one pass that
    /// builds no `RawValue`; serde only for what the scan leaves to it.
    pub fn parse(text: &'a str) -> Option<Self> {
        if let Some(object) = mcpvisor_jsonrpc::envelope::object(text) {
            return Some(Self {
                members: object.members,
            });
        }
        let mut de = serde_json::Deserializer::from_str(text);
        let members = de.deserialize_map(MembersVisitor).ok()?;
        de.end().ok()?;
        Some(Self { members })
    }

    /// The raw value of `key`, if present.
    pub fn get(&self, key: &str) -> Option<Raw<'a>> {
        self.members.iter().find(|(k, _)| k == key).map(|&(_, v)| v)
    }

    /// The members' keys, in order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.members.iter().map(|(k, _)| k.as_ref())
    }

    /// The string value of `key`, if it is a string.
    pub fn str(&self, key: &str) -> Option<String> {
        self.get(key)
            .and_then(|v| serde_json::from_str::<String>(v.get()).ok())
    }

    /// The string value of `key`, if it is a string, borrowed from the text
    /// when it has no escapes.
    pub fn str_ref(&self, key: &str) -> Option<Cow<'a, str>> {
        let value = self.get(key)?.get();
        // The value is JSON already checked: quoted, it is a whole string,
        // and without a backslash it is its own contents.
        match value.strip_prefix('"').and_then(|v| v.strip_suffix('"')) {
            Some(inner) if !inner.contains('\\') => Some(Cow::Borrowed(inner)),
            _ => serde_json::from_str::<String>(value).ok().map(Cow::Owned),
        }
    }

    /// Reads the `params` object of a message line in one pass over the
    /// line: its text, as written, and its members. `None` when the line
    /// has no `params` object, or when the scan behind it leaves the line to
    /// serde (see [`params_object`](mcpvisor_jsonrpc::envelope::params_object)):
    /// then [`raw_params`](mcpvisor_jsonrpc::envelope::raw_params) and
    /// [`RawObject::parse`] are the way, at the cost of a second pass.
    pub fn params_of(line: &'a [u8]) -> Option<(&'a str, Self)> {
        let params = mcpvisor_jsonrpc::envelope::params_object(line)??;
        Some(Self::from_params(params))
    }

    /// An object of the members a scan read (a `_meta` read with its
    /// message's params: [`ParamsObject::meta`](mcpvisor_jsonrpc::envelope::ParamsObject)).
    pub fn from_members(members: Vec<(Cow<'a, str>, Raw<'a>)>) -> Self {
        Self { members }
    }

    /// The object the scan read (see
    /// [`params_object`](mcpvisor_jsonrpc::envelope::params_object)), with
    /// its text.
    pub fn from_params(params: mcpvisor_jsonrpc::envelope::ParamsObject<'a>) -> (&'a str, Self) {
        (
            params.text,
            Self {
                members: params.members,
            },
        )
    }

    /// `text` (the text this object was read from) with the value of `key`
    /// replaced by `value` (raw JSON), every other byte kept, as three
    /// pieces not yet written out: the text before the value, `value`, the
    /// text after. `None` when `key` is absent or appears more than once
    /// (then [`RawObject::with`] is the way).
    pub fn replaced_parts<'x>(
        &self,
        text: &'x str,
        key: &str,
        value: &'x str,
    ) -> Option<[&'x str; 3]> {
        let mut found = self.members.iter().filter(|(k, _)| k == key);
        let (Some((_, v)), None) = (found.next(), found.next()) else {
            return None;
        };
        let old = v.get();
        let start = (old.as_ptr() as usize).wrapping_sub(text.as_ptr() as usize);
        let end = start.saturating_add(old.len());
        match (text.get(..start), text.get(end..)) {
            (Some(head), Some(tail)) if text.get(start..end) == Some(old) => {
                Some([head, value, tail])
            }
            _ => None,
        }
    }

    /// `text` (the text this object was read from) with several members
    /// replaced (`Some`) or removed (`None`) where they are, every other
    /// byte kept: the text between them is copied, not written member by
    /// member. `None` when an edited member is absent or appears more than
    /// once, or when two edits touch (then [`RawObject::write`] is the way).
    pub fn spliced(&self, text: &str, edits: &[(&str, Option<&str>)]) -> Option<String> {
        let base = text.as_ptr() as usize;
        let span = |v: Raw<'_>| {
            let start = (v.get().as_ptr() as usize).checked_sub(base)?;
            let end = start + v.get().len();
            (text.get(start..end) == Some(v.get())).then_some(start..end)
        };
        // (from, to, what goes there), in the order they lie.
        let mut cuts: Vec<(usize, usize, &str)> = Vec::with_capacity(edits.len());
        for &(key, value) in edits {
            let mut found = self
                .members
                .iter()
                .enumerate()
                .filter(|(_, (k, _))| k == key);
            let (Some((i, &(_, v))), None) = (found.next(), found.next()) else {
                return None;
            };
            let at = span(v)?;
            let cut = match (value, i) {
                (Some(new), _) => (at.start, at.end, new),
                // A later member goes with the comma before it.
                (None, _) if i > 0 => (span(self.members[i - 1].1)?.end, at.end, ""),
                // The first goes with the comma after it, or is all there was.
                (None, _) => {
                    let open = text.find('{')?;
                    let after = text[at.end..].trim_start_matches([' ', '\n', '\t', '\r']);
                    let end = text.len() - after.len();
                    match after.as_bytes().first() {
                        Some(b',') => (open + 1, end + 1, ""),
                        _ => (open + 1, end, ""),
                    }
                }
            };
            cuts.push(cut);
        }
        cuts.sort_unstable_by_key(|c| c.0);
        if cuts.windows(2).any(|w| w[0].1 > w[1].0) {
            return None;
        }
        let added: usize = cuts.iter().map(|c| c.2.len()).sum();
        let mut out = String::with_capacity(text.len() + added);
        let mut at = 0;
        for (from, to, new) in cuts {
            out.push_str(&text[at..from]);
            out.push_str(new);
            at = to;
        }
        out.push_str(&text[at..]);
        Some(out)
    }

    /// Writes the object back with `key` set to `value` (raw JSON): replaced
    /// in place when present, appended otherwise.
    pub fn with(&self, key: &str, value: &str) -> String {
        self.write(&[(key, Some(value))])
    }

    /// Writes the object back with several members replaced (`Some`),
    /// removed (`None`), or appended when absent.
    pub fn write(&self, edits: &[(&str, Option<&str>)]) -> String {
        let mut out = String::with_capacity(self.len_hint() + 64);
        out.push('{');
        let mut first = true;
        let mut push = |out: &mut String, k: &str, v: &str| {
            if !first {
                out.push(',');
            }
            first = false;
            push_key(out, k);
            out.push(':');
            out.push_str(v);
        };
        for (k, v) in &self.members {
            match edits.iter().find(|(ek, _)| ek == k) {
                Some((_, Some(new))) => push(&mut out, k, new),
                Some((_, None)) => {}
                None => push(&mut out, k, v.get()),
            }
        }
        for (ek, ev) in edits {
            if let Some(v) = ev {
                if !self.members.iter().any(|(k, _)| k == ek) {
                    push(&mut out, ek, v);
                }
            }
        }
        out.push('}');
        out
    }

    fn len_hint(&self) -> usize {
        self.members
            .iter()
            .map(|(k, v)| k.len() + v.get().len() + 4)
            .sum()
    }
}

/// `params` (an object's text) with the members of `envelope` (an object
/// of 2026-07-28 `_meta` members) set in its `_meta`, every other member
/// kept; `params` as it is when it is not an object.
pub(crate) fn with_envelope(params: &str, envelope: &str) -> String {
    let Some(obj) = RawObject::parse(params) else {
        return params.to_owned();
    };
    let meta = obj
        .get("_meta")
        .and_then(|m| RawObject::parse(m.get()))
        .zip(RawObject::parse(envelope))
        .map(|(meta, env)| {
            let edits: Vec<(&str, Option<&str>)> = env
                .members
                .iter()
                .map(|(k, v)| (k.as_ref(), Some(v.get())))
                .collect();
            meta.write(&edits)
        });
    obj.with("_meta", meta.as_deref().unwrap_or(envelope))
}

/// A request line with `envelope` set in its params' `_meta` (see
/// [`with_envelope`]), the rest of it kept; a request without params gets
/// params of just that `_meta`. The line as it is when it is not an
/// object, or its params are not one.
pub(crate) fn request_with_envelope(line: &bytes::Bytes, envelope: &str) -> bytes::Bytes {
    let Some(obj) = std::str::from_utf8(line).ok().and_then(RawObject::parse) else {
        return line.clone();
    };
    let params = match obj.get("params") {
        Some(params) if params.get().starts_with('{') => with_envelope(params.get(), envelope),
        Some(_) => return line.clone(),
        None => format!("{{\"_meta\":{envelope}}}"),
    };
    bytes::Bytes::from(obj.with("params", &params))
}

/// Writes `key` as a JSON string. A key with nothing to escape (nearly
/// every key) is written as it is, as serde would write it, with no
/// allocation.
fn push_key(out: &mut String, key: &str) {
    if key.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.push('"');
        out.push_str(key);
        out.push('"');
        return;
    }
    out.push_str(&quote(key));
}

struct MembersVisitor;

impl<'de> Visitor<'de> for MembersVisitor {
    type Value = Vec<(Cow<'de, str>, Raw<'de>)>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut members = Vec::with_capacity(map.size_hint().unwrap_or(8));
        while let Some(Key(key)) = map.next_key()? {
            let value: &'de RawValue = map.next_value()?;
            members.push((key, Raw::from(value)));
        }
        Ok(members)
    }
}

/// A key, borrowed from the text when it has no escapes (a `Cow<str>`
/// alone would always be copied).
struct Key<'de>(Cow<'de, str>);

impl<'de> serde::Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> Visitor<'de> for Visit {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a key")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
        }
        d.deserialize_str(Visit)
    }
}

/// A short piece of a line kept past it (a client's id, a progress token)
/// as bytes of its own in one allocation, which its clones share. (A copy
/// made as `Bytes::copy_from_slice` makes it takes a second allocation at
/// its first clone.) A longer piece is copied that way.
pub(crate) fn kept(piece: &[u8]) -> bytes::Bytes {
    const ROOM: usize = 30;
    struct Short {
        len: u8,
        buf: [u8; ROOM],
    }
    impl AsRef<[u8]> for Short {
        fn as_ref(&self) -> &[u8] {
            &self.buf[..usize::from(self.len)]
        }
    }
    match u8::try_from(piece.len()) {
        Ok(len) if piece.len() <= ROOM => {
            let mut buf = [0; ROOM];
            buf[..piece.len()].copy_from_slice(piece);
            bytes::Bytes::from_owner(Short { len, buf })
        }
        _ => bytes::Bytes::copy_from_slice(piece),
    }
}

/// JSON text for a string.
pub(crate) fn quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

/// Builds a request line from raw parts.
pub(crate) fn request(id: u64, method: &str, params: Option<&str>) -> bytes::Bytes {
    request_spanned(id, method, params).0
}

/// [`request`], and where the envelope of the line lies when its params
/// carry no routing member (`params.requestId`, a progress token): `None`
/// for a method written with escapes.
pub(crate) fn request_spanned(
    id: u64,
    method: &str,
    params: Option<&str>,
) -> (bytes::Bytes, Option<mcpvisor_jsonrpc::Spans>) {
    match params {
        Some(p) => request_parts(id, method, Some(&[p])),
        None => request_parts(id, method, None),
    }
}

/// Builds a request line whose params are `params`' pieces, one after
/// another (as [`RawObject::replaced_parts`] gives them): the params are
/// written once, into the line. With the spans [`request_spanned`] gives.
fn request_parts(
    id: u64,
    method: &str,
    params: Option<&[&str]>,
) -> (bytes::Bytes, Option<mcpvisor_jsonrpc::Spans>) {
    let mut out = bytes::BytesMut::with_capacity(request_len(method, params));
    let spans = write_request(&mut out, id, method, params);
    (out.freeze(), spans)
}

/// About the length of the line [`request_parts`] writes: exact for an id
/// of up to 13 digits and a method without escapes. A longer line grows
/// its buffer as it is written.
fn request_len(method: &str, params: Option<&[&str]>) -> usize {
    let params_len = params.map_or(0, |p| p.iter().map(|s| s.len()).sum::<usize>() + 10);
    48 + method.len() + params_len
}

/// Writes the line at the end of `out`, and says where its envelope lies
/// in it (see [`request_spanned`]).
fn write_request(
    out: &mut bytes::BytesMut,
    id: u64,
    method: &str,
    params: Option<&[&str]>,
) -> Option<mcpvisor_jsonrpc::Spans> {
    use bytes::BufMut as _;
    let start = out.len();
    out.put_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    let id_start = out.len() - start;
    out.put_slice(mcpvisor_session::writer::Digits::new(id).as_bytes());
    let id_end = out.len() - start;
    out.put_slice(b",\"method\":");
    // A method name needs no escapes but in odd cases.
    let spans = if method.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.put_u8(b'"');
        let method_start = out.len() - start;
        out.put_slice(method.as_bytes());
        out.put_u8(b'"');
        Some(mcpvisor_jsonrpc::Spans::plain(
            mcpvisor_jsonrpc::Kind::Request,
            id_start..id_end,
            Some(method_start..method_start + method.len()),
        ))
    } else {
        out.put_slice(quote(method).as_bytes());
        None
    };
    if let Some(p) = params {
        out.put_slice(b",\"params\":");
        for piece in p {
            out.put_slice(piece.as_bytes());
        }
    }
    out.put_u8(b'}');
    spans
}

/// Room the gateway writes the request lines of its calls into, one after
/// another, each split off as bytes that share the room: a line takes no
/// allocation of its own. The room is written again from its start once
/// every line in it is gone; while some still live (calls in flight, held
/// by the servers' sessions), new room is taken and the old goes with its
/// last line. A line longer than a quarter of the room takes its own.
#[derive(Debug, Default)]
pub(crate) struct Room(bytes::BytesMut);

/// The size of a [`Room`].
const ROOM_BYTES: usize = 16 * 1024;

impl Room {
    /// [`request_parts`], written into the room, with the spans
    /// [`request_spanned`] gives.
    pub(crate) fn request_parts(
        &mut self,
        id: u64,
        method: &str,
        params: Option<&[&str]>,
    ) -> (bytes::Bytes, Option<mcpvisor_jsonrpc::Spans>) {
        let len = request_len(method, params);
        if len > ROOM_BYTES / 4 {
            return request_parts(id, method, params);
        }
        if self.0.capacity() - self.0.len() < len {
            self.0.reserve(ROOM_BYTES);
        }
        let spans = write_request(&mut self.0, id, method, params);
        (self.0.split().freeze(), spans)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_written_in_a_room_read_as_written_while_it_is_reused_and_replaced() {
        let mut room = Room::default();
        let params = [r#"{"name":"#, r#""echo""#, r#","arguments":{"s":"x"}}"#];
        let expected = |id: u64| request_parts(id, "tools/call", Some(&params)).0;
        // Lines that live on while more are written: the room fills, and
        // new room is taken while these still hold the old.
        let kept: Vec<_> = (0..400)
            .map(|id| room.request_parts(id, "tools/call", Some(&params)).0)
            .collect();
        for (id, line) in (0..).zip(&kept) {
            assert_eq!(line, &expected(id));
        }
        drop(kept);
        // Lines dropped as soon as written: the room is written again.
        for id in 400..1200 {
            assert_eq!(
                room.request_parts(id, "tools/call", Some(&params)).0,
                expected(id)
            );
        }
        // A method that needs escapes, and a line too long for the room.
        let odd = room.request_parts(1, "odd\"method", None).0;
        assert_eq!(odd, request_parts(1, "odd\"method", None).0);
        let big = "x".repeat(ROOM_BYTES);
        let long = room.request_parts(2, "tools/call", Some(&[&big])).0;
        assert_eq!(long, request_parts(2, "tools/call", Some(&[&big])).0);
        mcpvisor_jsonrpc::Envelope::peek(&odd).expect("valid JSON");
    }

    #[test]
    fn a_kept_piece_reads_as_it_was_however_long_and_however_often_cloned() {
        let long = "9".repeat(200);
        for piece in ["", "7", "\"a-client-id-of-thirty-bytes\"", &long] {
            let kept = kept(piece.as_bytes());
            let clones: Vec<bytes::Bytes> = (0..3).map(|_| kept.clone()).collect();
            drop(kept);
            for c in clones {
                assert_eq!(&c[..], piece.as_bytes());
            }
        }
    }

    #[test]
    fn a_spliced_object_reads_as_the_written_one() {
        let texts = [
            r#"{"name":"a","arguments":{"x":1},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}"#,
            r#"{"_meta":{"k":1},"name":"a","arguments":{}}"#,
            r#"{ "_meta" : {} , "name" : "a" }"#,
            r#"{"name":"a","_meta":{}}"#,
            r#"{"_meta":{}}"#,
            r#"{"n\u0061me":"a","_meta":{},"z":[1,{"_meta":2}]}"#,
        ];
        let edits: [&[(&str, Option<&str>)]; 4] = [
            &[("name", Some(r#""b__a""#)), ("_meta", None)],
            &[("_meta", None)],
            &[
                ("name", Some("1")),
                ("_meta", Some(r#"{"progressToken":7}"#)),
            ],
            &[("_meta", None), ("name", None)],
        ];
        let mut spliced_some = 0;
        for text in texts {
            let obj = RawObject::parse(text).expect("an object");
            for edit in edits {
                let written: serde_json::Value =
                    serde_json::from_str(&obj.write(edit)).expect("JSON");
                match obj.spliced(text, edit) {
                    Some(out) => {
                        spliced_some += 1;
                        let read: serde_json::Value =
                            serde_json::from_str(&out).unwrap_or_else(|e| panic!("{out}: {e}"));
                        assert_eq!(read, written, "{text} {edit:?}");
                    }
                    // Only an absent or touching member leaves it to `write`.
                    None => assert!(
                        edit.iter().any(|(k, _)| obj.get(k).is_none())
                            || edit.iter().all(|(_, v)| v.is_none()),
                        "{text} {edit:?}"
                    ),
                }
            }
        }
        assert!(spliced_some >= 10, "{spliced_some}");
    }

    #[test]
    fn a_built_request_s_spans_are_where_its_envelope_lies() {
        let params = [r#"{"name":"#, r#""echo""#, r#","arguments":{"s":"x"}}"#];
        for (id, method) in [
            (7, "tools/call"),
            (18_446_744_073_709_551_615, "prompts/get"),
        ] {
            let mut room = Room::default();
            let (line, spans) = room.request_parts(id, method, Some(&params));
            let spans = spans.expect("plain method");
            assert_eq!(line, request_parts(id, method, Some(&params)).0);
            let (alone, alone_spans) = request_spanned(id, method, Some(&params.concat()));
            assert_eq!((&alone, alone_spans.as_ref()), (&line, Some(&spans)));
            let from_spans = spans.envelope(&line).expect("fits");
            let peeked = mcpvisor_jsonrpc::Envelope::peek(&line).expect("valid");
            assert_eq!(from_spans.kind, peeked.kind);
            assert_eq!(from_spans.id.map(Raw::get), peeked.id.map(Raw::get));
            assert_eq!(from_spans.method, peeked.method);
            assert!(peeked.progress_token.is_none() && peeked.request_id.is_none());
        }
        assert!(request_spanned(1, "odd\"method", None).1.is_none());
    }

    #[test]
    fn replaces_one_member_and_keeps_the_rest_byte_for_byte() {
        let text =
            r#"{"name":"a.b","arguments":{"x":1.0,"big":18446744073709551616},"_meta":{"k":"ü"}}"#;
        let obj = RawObject::parse(text).expect("object");
        assert_eq!(obj.str("name").as_deref(), Some("a.b"));
        let out = obj.with("name", "\"b\"");
        assert_eq!(
            out,
            r#"{"name":"b","arguments":{"x":1.0,"big":18446744073709551616},"_meta":{"k":"ü"}}"#
        );
    }

    #[test]
    fn a_replaced_member_keeps_the_text_around_it() {
        let text = r#"{ "name" : "a.b" , "arguments":{"x":1.0}}"#;
        let obj = RawObject::parse(text).expect("object");
        assert_eq!(obj.str_ref("name").as_deref(), Some("a.b"));
        assert_eq!(
            obj.replaced_parts(text, "name", "\"b\"")
                .map(|p| p.concat()),
            Some(r#"{ "name" : "b" , "arguments":{"x":1.0}}"#.to_owned())
        );
        // Absent or repeated: no pieces (the object is written back).
        assert_eq!(obj.replaced_parts(text, "y", "1"), None);
        let text = r#"{"name":"a","name":"b"}"#;
        let obj = RawObject::parse(text).expect("object");
        assert_eq!(obj.replaced_parts(text, "name", "1"), None);
    }

    #[test]
    fn params_read_in_one_pass_are_the_params_as_written() {
        use mcpvisor_jsonrpc::envelope::raw_params;
        let lines = [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","arguments":{"x":[1,{"y":"}"}]}}}"#,
            r#"{"params" : { "name" : "a" } ,"id":1,"method":"m","jsonrpc":"2.0"}"#,
            "{\"id\":1,\"params\":{\n\t\"k\":\"\\\"}\"\r\n}\n}",
            r#"{"id":1,"params":{"a":1,"b":"ü","c":null},"extra":{"params":2}}"#,
            r#"{"id":1,"params":{"a":{}}}"#,
            r#"{"id":1,"params":{}}"#,
            r#"{"id":1,"params":{"\u0061":1,"a":2}}"#,
        ];
        for line in lines {
            let (text, obj) = RawObject::params_of(line.as_bytes()).expect(line);
            let raw = raw_params(line.as_bytes()).expect(line);
            assert_eq!(text, raw.get(), "{line}");
            let again = RawObject::parse(raw.get()).expect(line);
            assert!(obj.keys().eq(again.keys()), "{line}");
            assert_eq!(obj.members, again.members, "{line}");
        }
        // Left to the two-pass way: no params object, a line that is not
        // JSON, a line the scan leaves to serde.
        for line in [
            r#"{"id":1,"method":"m"}"#,
            r#"{"id":1,"params":[1]}"#,
            r#"{"id":1,"params":{"a":1}"#,
            r#"{"id":1,"params":null}"#,
            r#"{"id":1,"par\u0061ms":{"a":1}}"#,
        ] {
            assert!(RawObject::params_of(line.as_bytes()).is_none(), "{line}");
        }
    }

    #[test]
    fn string_values_are_borrowed_unless_escaped() {
        let obj =
            RawObject::parse(r#"{"a":"x y","b":"x\"y\u00e9","c":1,"d":null,"e":"","f":["x"]}"#)
                .expect("object");
        assert!(matches!(obj.str_ref("a"), Some(Cow::Borrowed("x y"))));
        assert!(matches!(obj.str_ref("e"), Some(Cow::Borrowed(""))));
        assert_eq!(obj.str_ref("b").as_deref(), Some("x\"yé"));
        assert_eq!(obj.str("b").as_deref(), Some("x\"yé"));
        for key in ["c", "d", "f", "g"] {
            assert_eq!(obj.str_ref(key), None, "{key}");
            assert_eq!(obj.str(key), None, "{key}");
        }
    }

    #[test]
    fn request_lines() {
        assert_eq!(
            &request(7, "tools/call", Some("{}"))[..],
            br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{}}"#
        );
        assert_eq!(
            &request(1, "a\"b", None)[..],
            br#"{"jsonrpc":"2.0","id":1,"method":"a\"b"}"#
        );
    }

    #[test]
    fn appends_and_removes() {
        let obj = RawObject::parse(r#"{ "a" : 1 , "b":[2] }"#).expect("object");
        assert_eq!(
            obj.write(&[("a", None), ("c", Some("3"))]),
            r#"{"b":[2],"c":3}"#
        );
    }

    #[test]
    fn escaped_keys_survive() {
        let obj = RawObject::parse(r#"{"a\"b":1}"#).expect("object");
        assert_eq!(obj.with("x", "2"), r#"{"a\"b":1,"x":2}"#);
    }

    #[test]
    fn the_envelope_joins_what_meta_holds() {
        let env = r#"{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"roots":{}}}"#;
        let line = bytes::Bytes::from_static(
            br#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"x","_meta":{"progressToken":4}}}"#,
        );
        let out = request_with_envelope(&line, env);
        assert_eq!(
            std::str::from_utf8(&out).expect("utf-8"),
            r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"x","_meta":{"progressToken":4,"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"roots":{}}}}}"#
        );
        let bare = bytes::Bytes::from_static(br#"{"jsonrpc":"2.0","id":5,"method":"tools/list"}"#);
        let out = request_with_envelope(&bare, env);
        assert_eq!(
            std::str::from_utf8(&out).expect("utf-8"),
            format!(
                r#"{{"jsonrpc":"2.0","id":5,"method":"tools/list","params":{{"_meta":{env}}}}}"#
            )
        );
        assert_eq!(
            with_envelope(r#"{"a":1}"#, env),
            format!(r#"{{"a":1,"_meta":{env}}}"#)
        );
        // A member of the same name is replaced, not repeated.
        let stale = r#"{"_meta":{"io.modelcontextprotocol/protocolVersion":"2025-11-25"}}"#;
        let out = with_envelope(stale, env);
        assert_eq!(out.matches("protocolVersion").count(), 1, "{out}");
        assert!(out.contains("2026-07-28"), "{out}");
        let array =
            bytes::Bytes::from_static(br#"{"jsonrpc":"2.0","id":6,"method":"m","params":[1]}"#);
        assert_eq!(request_with_envelope(&array, env), array);
    }

    #[test]
    fn not_an_object() {
        assert!(RawObject::parse("[1]").is_none());
        assert!(RawObject::parse("{").is_none());
        assert!(RawObject::parse("{} x").is_none());
    }
}
