//! The envelope reading against serde_json, differentially (the
//! `differential` feature: for tests and `mcpvisor-bench scan`, not for
//! mcpvisor itself).
//!
//! [`crate::Envelope::peek`] reads most lines with its own structural scan
//! (`scan.rs`), a second JSON grammar beside serde_json's, and leaves the
//! rest to serde. This module generates lines ([`Cases`]) and checks every
//! public way of reading one ([`check`]) against a [`reference()`] reading made
//! with serde_json alone, with none of the crate's own parsing:
//!
//! - a line is JSON when serde_json reads it (as `IgnoredAny`, which follows
//!   nesting of any depth without recursion, as serde's path in the crate
//!   does) from valid UTF-8;
//! - an array is a batch, any other value that is not an object is not a
//!   message;
//! - each of `id`, `method`, `params`, `result` and `error` may appear once
//!   (member names compared once decoded): a repeated one is refused;
//! - `method` is a string; `params` an object, an array or null; inside a
//!   `params` object, the last `requestId` and `progressToken` count, and
//!   `_meta` is an object (whose `progressToken` appears at most once, `null`
//!   being none) or null;
//! - a member name that serde cannot decode (a lone surrogate escape) is
//!   refused where the envelope reads names: at the top level, in `params`
//!   and in `_meta`;
//! - the kind follows from `method`, `id`, `result` and `error` as
//!   [`crate::Kind`] says, and a request's id may not be null.
//!
//! The check compares the verdict (a message, or which error), and for a
//! message every member it borrows, by its text and where it lies in the
//! line; the `params` object as [`crate::envelope::params_object`] and
//! [`crate::Envelope::peek_with_params`] read it; [`crate::envelope::raw_params`];
//! that [`crate::envelope::scan_id`], on the line or any head of it, only
//! ever gives a whole JSON value, and the message's own id when it has one;
//! that splicing a new id in and the old one back gives the line again,
//! and that the spliced line reads as the same message with the new id,
//! from a fresh scan and from the spans moved by [`crate::Spans::with_id_len`].
//! [`framing`] checks [`crate::LineCodec`] on streams of the same lines cut
//! into reads at random. Any difference is a [`Disagreement`] naming the
//! line.

use std::fmt;

use bytes::BytesMut;
use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::value::RawValue;
use tokio_util::codec::Decoder;

use crate::envelope::{params_object, raw_params, scan_id};
use crate::{Envelope, EnvelopeError, Frame, Kind, LineCodec, Raw, Spans};

/// What a reading of a line found: the error it gives, or the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Not JSON (or JSON the envelope cannot take, as serde refuses it).
    Json,
    /// A batch.
    Batch,
    /// JSON, not a routable message, for this reason.
    Invalid(&'static str),
    /// A message.
    Message(Message),
}

/// A message's routing members, each as its text and the byte offset
/// where it lies in the line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub kind: Kind,
    pub id: Option<(usize, String)>,
    pub method: Option<String>,
    pub request_id: Option<(usize, String)>,
    pub progress_token: Option<(usize, String)>,
}

/// A line on which a reading differs from the reference, or breaks a rule.
#[derive(Debug)]
pub struct Disagreement {
    pub line: Vec<u8>,
    pub what: String,
}

impl fmt::Display for Disagreement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown = String::from_utf8_lossy(&self.line);
        let shown: String = match shown.chars().count() {
            n if n > 400 => {
                let head: String = shown.chars().take(400).collect();
                format!("{head}... ({} bytes)", self.line.len())
            }
            _ => shown.into_owned(),
        };
        write!(f, "{} on {shown:?}", self.what)
    }
}

impl std::error::Error for Disagreement {}

// === the reference ===

/// A JSON object's members in order, names decoded, values as written.
type Members<'a> = Vec<(String, &'a RawValue)>;

struct ObjectVisitor;

impl<'de> Visitor<'de> for ObjectVisitor {
    type Value = Members<'de>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut members = Vec::new();
        while let Some(name) = map.next_key::<String>()? {
            members.push((name, map.next_value::<&'de RawValue>()?));
        }
        Ok(members)
    }
}

/// The members of `text`, one JSON object, or `None` when serde refuses
/// it or a name; `Some(None)` when it is another value.
fn object(text: &str) -> Option<Option<Members<'_>>> {
    if !text.starts_with('{') {
        return Some(None);
    }
    let mut de = serde_json::Deserializer::from_str(text);
    de.deserialize_map(ObjectVisitor).ok().map(Some)
}

/// The one member named `name`; `Err` when it appears more than once.
fn once<'a>(members: &Members<'a>, name: &str) -> Result<Option<&'a RawValue>, ()> {
    let mut found = members.iter().filter(|(n, _)| n == name).map(|(_, v)| *v);
    let first = found.next();
    match found.next() {
        Some(_) => Err(()),
        None => Ok(first),
    }
}

/// The last member named `name`.
fn last<'a>(members: &Members<'a>, name: &str) -> Option<&'a RawValue> {
    members
        .iter()
        .rev()
        .find(|(n, _)| n == name)
        .map(|(_, v)| *v)
}

/// The reading of `line` by the rules in this module's documentation, with
/// serde_json alone; and the line's `params` object (its text and members)
/// when it is a message that has one.
pub fn reference(line: &[u8]) -> (Verdict, Option<(&str, Members<'_>)>) {
    let Ok(text) = std::str::from_utf8(line) else {
        return (Verdict::Json, None);
    };
    if serde_json::from_str::<IgnoredAny>(text).is_err() {
        return (Verdict::Json, None);
    }
    // The value's own first byte tells its type (a string is not decoded:
    // the line is JSON whatever its escapes spell).
    let members = match text.trim_start_matches([' ', '\t', '\r', '\n']).as_bytes()[0] {
        b'[' => return (Verdict::Batch, None),
        b'{' => match object(text.trim_start_matches([' ', '\t', '\r', '\n'])) {
            Some(Some(members)) => members,
            _ => return (Verdict::Json, None),
        },
        _ => return (Verdict::Invalid("not an object"), None),
    };
    match envelope(line, &members) {
        Ok(found) => found,
        Err(()) => (Verdict::Json, None),
    }
}

type Found<'a> = (Verdict, Option<(&'a str, Members<'a>)>);

fn envelope<'a>(line: &'a [u8], members: &Members<'a>) -> Result<Found<'a>, ()> {
    let at = |v: &RawValue| {
        (
            v.get().as_ptr() as usize - line.as_ptr() as usize,
            v.get().to_owned(),
        )
    };
    let id = once(members, "id")?;
    let method = match once(members, "method")? {
        None => None,
        Some(m) => Some(serde_json::from_str::<String>(m.get()).map_err(drop)?),
    };
    let params = once(members, "params")?;
    let result = once(members, "result")?.is_some();
    let error = once(members, "error")?.is_some();
    let (mut request_id, mut progress_token, mut meta_token) = (None, None, None);
    let mut params_members = None;
    if let Some(params) = params {
        match params.get().as_bytes()[0] {
            b'{' => {
                let inner = object(params.get()).ok_or(())?.ok_or(())?;
                request_id = last(&inner, "requestId");
                progress_token = last(&inner, "progressToken");
                // Every `_meta` must be readable; the last one counts.
                for (name, meta) in &inner {
                    if name != "_meta" {
                        continue;
                    }
                    meta_token = match meta.get().as_bytes()[0] {
                        b'n' => None,
                        b'{' => {
                            let meta = object(meta.get()).ok_or(())?.ok_or(())?;
                            once(&meta, "progressToken")?.filter(|t| t.get() != "null")
                        }
                        _ => return Err(()),
                    };
                }
                params_members = Some((params.get(), inner));
            }
            b'[' | b'n' => {}
            _ => return Err(()),
        }
    }
    let kind = match (&method, id) {
        (Some(_), Some(id)) if id.get() == "null" => {
            return Ok((Verdict::Invalid("request id is null"), None));
        }
        (Some(_), Some(_)) => Kind::Request,
        (Some(_), None) => Kind::Notification,
        (None, Some(_)) if result || error => Kind::Response,
        (None, _) => return Ok((Verdict::Invalid("no method, result or error"), None)),
    };
    let progress_token = match kind {
        Kind::Request => meta_token,
        _ => progress_token,
    };
    let message = Message {
        kind,
        id: id.map(at),
        method,
        request_id: request_id.map(at),
        progress_token: progress_token.map(at),
    };
    Ok((Verdict::Message(message), params_members))
}

// === the crate's readings ===

/// What a peek found, in the reference's terms.
fn verdict(line: &[u8], read: Result<&Envelope<'_>, &EnvelopeError>) -> Verdict {
    let at = |r: Option<Raw<'_>>| {
        r.map(|r| {
            let span = crate::rewrite::span(line, r);
            (span.start, r.get().to_owned())
        })
    };
    match read {
        Err(EnvelopeError::Json(_)) => Verdict::Json,
        Err(EnvelopeError::Batch) => Verdict::Batch,
        Err(EnvelopeError::Invalid(why)) => Verdict::Invalid(why),
        Ok(env) => Verdict::Message(Message {
            kind: env.kind,
            id: at(env.id),
            method: env.method.as_deref().map(str::to_owned),
            request_id: at(env.request_id),
            progress_token: at(env.progress_token),
        }),
    }
}

fn disagree(line: &[u8], what: impl Into<String>) -> Disagreement {
    Disagreement {
        line: line.to_vec(),
        what: what.into(),
    }
}

/// What one line showed, for the counts of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// A message, read by the crate's own scan.
    Scanned,
    /// A message, left by the scan to serde.
    Serde,
    /// Refused, as the reference refuses it.
    Refused,
}

/// Checks every reading of `line` against the reference and the rules in
/// this module's documentation.
pub fn check(line: &[u8]) -> Result<Seen, Disagreement> {
    let (want, want_params) = reference(line);
    let read = Envelope::peek(line);
    let got = verdict(line, read.as_ref());
    if got != want {
        return Err(disagree(
            line,
            format!("Envelope::peek read {got:?}, serde_json {want:?}"),
        ));
    }
    // The params object, as the scan reads it (when it answers) and as the
    // envelope scan keeps it.
    let want_params = want_params.map(|(text, members)| {
        let members: Vec<(String, String)> = members
            .into_iter()
            .map(|(n, v)| (n, v.get().to_owned()))
            .collect();
        (
            text.as_ptr() as usize - line.as_ptr() as usize,
            text.to_owned(),
            members,
        )
    });
    let params_of = |p: Option<crate::envelope::ParamsObject<'_>>| {
        p.map(|p| {
            let members: Vec<(String, String)> = p
                .members
                .into_iter()
                .map(|(n, v)| (n.into_owned(), v.get().to_owned()))
                .collect();
            (
                p.text.as_ptr() as usize - line.as_ptr() as usize,
                p.text.to_owned(),
                members,
            )
        })
    };
    let scanned = params_object(line);
    if let (Some(scanned), Verdict::Message(_)) = (scanned, &want) {
        let scanned = params_of(scanned);
        if scanned != want_params {
            return Err(disagree(
                line,
                format!("params_object read {scanned:?}, serde_json {want_params:?}"),
            ));
        }
    }
    let with_params = Envelope::peek_with_params(line);
    let also = verdict(line, with_params.as_ref().map(|(env, _)| env));
    if also != want {
        return Err(disagree(
            line,
            format!("Envelope::peek_with_params read {also:?}, serde_json {want:?}"),
        ));
    }
    let mut scanned_whole = false;
    if let Ok((_, Some(params))) = with_params {
        scanned_whole = true;
        let params = params_of(params);
        if params != want_params {
            return Err(disagree(
                line,
                format!("peek_with_params kept the params {params:?}, serde_json {want_params:?}"),
            ));
        }
    }
    ids(line, &want)?;
    let Verdict::Message(message) = &want else {
        return Ok(Seen::Refused);
    };
    let raw =
        raw_params(line).map(|p| (p.get().as_ptr() as usize - line.as_ptr() as usize, p.get()));
    let want_raw = want_params
        .as_ref()
        .map(|(at, text, _)| (*at, text.as_str()));
    if want_raw.is_some() && raw != want_raw {
        return Err(disagree(
            line,
            format!("raw_params read {raw:?}, serde_json {want_raw:?}"),
        ));
    }
    if let Ok(env) = &read {
        splices(line, env, message)?;
    }
    Ok(if scanned_whole {
        Seen::Scanned
    } else {
        Seen::Serde
    })
}

/// `scan_id` on the line and on every head of it: a whole JSON value or
/// nothing; on the whole line, the message's id when it has one, and it is
/// a string or a number whose member name is spelled without escapes.
fn ids(line: &[u8], want: &Verdict) -> Result<(), Disagreement> {
    let id = match want {
        Verdict::Message(Message {
            id: Some((at, id)), ..
        }) => Some((*at, id.as_str())),
        _ => None,
    };
    // Every head of a short line, and 16 of a long one.
    let step = match line.len() {
        0..=128 => 1,
        n => n / 16,
    };
    for end in (0..line.len()).step_by(step).chain([line.len()]) {
        let Some(found) = scan_id(&line[..end]) else {
            continue;
        };
        if serde_json::from_str::<&RawValue>(found).is_err() {
            return Err(disagree(
                line,
                format!("scan_id found {found:?}, not a JSON value, in the first {end} bytes"),
            ));
        }
    }
    let Some((at, id)) = id else {
        return Ok(());
    };
    let plain_name = line[..at]
        .trim_ascii_end()
        .strip_suffix(b":")
        .is_some_and(|before| before.trim_ascii_end().ends_with(b"\"id\""));
    let scalar = id.starts_with(|c: char| c == '"' || c == '-' || c.is_ascii_digit());
    let found = scan_id(line);
    if plain_name && scalar && found != Some(id) {
        return Err(disagree(
            line,
            format!("scan_id found {found:?}, the id is {id}"),
        ));
    }
    Ok(())
}

/// A new id spliced in reads as the same message with that id, by a fresh
/// peek and by the moved spans; the old one spliced back gives the line.
fn splices(line: &[u8], env: &Envelope<'_>, message: &Message) -> Result<(), Disagreement> {
    let Some(id) = env.id else {
        return Ok(());
    };
    // One of three new ids, by the line's length: shorter, longer, another type.
    let new = ["\"m-1.7\"", "18446744073709551616", "0"][line.len() % 3];
    {
        let spliced = crate::rewrite::splice(line, id, new.as_bytes());
        let again = Envelope::peek(&spliced);
        let mut want = message.clone();
        let shift = |p: &mut Option<(usize, String)>| {
            if let Some((at, _)) = p.as_mut().filter(|(at, _)| *at > want_id_at(message)) {
                *at = *at + new.len() - id.get().len();
            }
        };
        shift(&mut want.request_id);
        shift(&mut want.progress_token);
        want.id = Some((want_id_at(message), new.to_owned()));
        let got = verdict(&spliced, again.as_ref());
        if got != Verdict::Message(want.clone()) {
            return Err(disagree(
                line,
                format!("with the id {new} spliced in, the line reads {got:?}, not {want:?}"),
            ));
        }
        if let Some(spans) = Spans::of(line, env) {
            let moved = spans.with_id_len(new.len());
            let from_spans = moved.envelope(&spliced).ok_or_else(|| {
                disagree(
                    line,
                    format!("the spans moved for the id {new} do not fit the spliced line"),
                )
            })?;
            let got = verdict(&spliced, Ok(&from_spans));
            if got != Verdict::Message(want) {
                return Err(disagree(
                    line,
                    format!("with the id {new} spliced in, the moved spans read {got:?}"),
                ));
            }
        }
        let Ok(back) = again else {
            unreachable_message(line)?
        };
        let back_id = back
            .id
            .ok_or_else(|| disagree(line, "the spliced line lost its id"))?;
        let restored = crate::rewrite::splice(&spliced, back_id, id.get().as_bytes());
        if restored[..] != line[..] {
            return Err(disagree(
                line,
                "splicing the old id back does not give the line",
            ));
        }
    }
    Ok(())
}

fn want_id_at(message: &Message) -> usize {
    message.id.as_ref().map_or(0, |(at, _)| *at)
}

fn unreachable_message<T>(line: &[u8]) -> Result<T, Disagreement> {
    Err(disagree(line, "the spliced line is not a message"))
}

/// The frames [`LineCodec`] gives for `lines` joined by newlines (`\r\n`
/// now and then) and cut into reads by `cuts`: each line without its
/// terminator, a line over `max` as its length and head, blank lines
/// skipped.
pub fn framing(lines: &[Vec<u8>], max: usize, rng: &mut fastrand::Rng) -> Result<(), Disagreement> {
    let mut stream = Vec::new();
    let mut want = Vec::new();
    for line in lines {
        // Newlines inside a line would make two; the codec's own rules
        // decide the rest.
        let line: Vec<u8> = line.iter().copied().filter(|&b| b != b'\n').collect();
        let crlf = rng.u8(..4) == 0;
        stream.extend_from_slice(&line);
        stream.extend_from_slice(if crlf { b"\r\n" } else { b"\n" });
        let mut content = line.as_slice();
        if crlf {
            // The codec drops one `\r` before the newline, not two.
        } else if let Some(stripped) = content.strip_suffix(b"\r") {
            content = stripped;
        }
        if want.is_empty() && stream.len() == line.len() + 1 + usize::from(crlf) {
            content = content.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(content);
        }
        if content.len() > max {
            let head = bytes::Bytes::copy_from_slice(
                &content[..crate::frame::OVERSIZE_HEAD.min(content.len())],
            );
            want.push(Frame::Oversize {
                len: content.len(),
                head,
            });
        } else if !content.iter().all(u8::is_ascii_whitespace) {
            want.push(Frame::Line(bytes::Bytes::copy_from_slice(content)));
        }
    }
    let mut codec = LineCodec::new(max);
    let mut buf = BytesMut::new();
    let mut got = Vec::new();
    let mut at = 0;
    while at < stream.len() {
        let end = (at + 1 + rng.usize(..200)).min(stream.len());
        buf.extend_from_slice(&stream[at..end]);
        at = end;
        while let Some(frame) = codec
            .decode(&mut buf)
            .map_err(|e| disagree(&stream, e.to_string()))?
        {
            got.push(frame);
        }
    }
    while let Some(frame) = codec
        .decode_eof(&mut buf)
        .map_err(|e| disagree(&stream, e.to_string()))?
    {
        got.push(frame);
    }
    if let Some(i) = (0..want.len().max(got.len())).find(|&i| want.get(i) != got.get(i)) {
        return Err(disagree(
            &stream,
            format!(
                "frame {i}: the codec gave {:?}, the lines make {:?}",
                got.get(i),
                want.get(i)
            ),
        ));
    }
    Ok(())
}

// === the cases ===

/// Messages whose every single-byte change is checked: each position
/// replaced by each byte value, and each byte removed.
pub const BASES: &[&str] = &[
    r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"a","arguments":{"q":"x\"y","n":[1,-2.5e3,null,true]},"_meta":{"progressToken":"t"}}}"#,
    r#"{"jsonrpc":"2.0","id":"r-1","result":{"content":[{"type":"text","text":"é\u00e9\n"}]}}"#,
    r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":18446744073709551616,"reason":"x"}}"#,
    r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"m"}}"#,
];

/// Lines at the edges: numbers, escapes, duplicate members, deep nesting.
pub fn edge_cases() -> Vec<Vec<u8>> {
    let mut cases: Vec<Vec<u8>> = Vec::new();
    for number in [
        "0",
        "-0",
        "-0.0",
        "0e0",
        "0E+0",
        "0e-0",
        "1e999",
        "-1e999",
        "1E-400",
        "4.9e-324",
        "1.7976931348623157e308",
        "18446744073709551615",
        "18446744073709551616",
        "-9223372036854775808",
        "-9223372036854775809",
        "123456789012345678901234567890",
        "00",
        "01",
        "-",
        "-a",
        "1.",
        ".1",
        "1e",
        "1e+",
        "1e-",
        "+1",
        "1.e1",
        "0x10",
        "1_0",
        "Infinity",
        "NaN",
        "-Infinity",
        "1.0e+",
        "2.",
        "-01.5",
    ] {
        cases.push(format!(r#"{{"jsonrpc":"2.0","id":{number},"method":"m"}}"#).into_bytes());
        cases.push(format!(r#"{{"id":1,"result":{number}}}"#).into_bytes());
        cases.push(
            format!(
                r#"{{"method":"notifications/progress","params":{{"progressToken":{number}}}}}"#
            )
            .into_bytes(),
        );
    }
    for string in [
        r#""""#,
        r#""\u0000""#,
        r#""\u001f""#,
        r#""\u001F""#,
        r#""\uD834\uDD1E""#,
        r#""\ud834\udd1e""#,
        r#""\ud800""#,
        r#""\udfff""#,
        r#""\ud800\u0041""#,
        r#""\ud800\ud800""#,
        r#""\udc00\ud800""#,
        r#""\u12""#,
        r#""\u12G4""#,
        r#""\x41""#,
        r#""\'""#,
        r#""\a""#,
        r#""\/\b\f\n\r\t\"\\""#,
        r#""\""#,
        "\"\u{7f}\"",
        "\"\u{1}\"",
        "\"\t\"",
        "\"\u{ffff}\"",
        "\"\u{10ffff}\"",
        "\"\u{2028}\"",
    ] {
        cases.push(format!(r#"{{"jsonrpc":"2.0","id":{string},"method":"m"}}"#).into_bytes());
        cases.push(format!(r#"{{"jsonrpc":"2.0","id":1,"method":{string}}}"#).into_bytes());
        cases.push(format!(r#"{{{string}:1,"id":1,"result":null}}"#).into_bytes());
        cases.push(
            format!(r#"{{"method":"m","params":{{{string}:1,"requestId":{string}}}}}"#)
                .into_bytes(),
        );
        cases.push(
            format!(r#"{{"id":1,"method":"m","params":{{"_meta":{{{string}:{string}}}}}}}"#)
                .into_bytes(),
        );
    }
    for dup in [
        r#"{"id":1,"id":2,"method":"m"}"#,
        r#"{"id":1,"i\u0064":2,"method":"m"}"#,
        r#"{"id":1,"method":"m","method":"m"}"#,
        r#"{"id":1,"method":"m","params":{},"params":{}}"#,
        r#"{"id":1,"result":1,"result":1}"#,
        r#"{"id":1,"error":{},"error":{}}"#,
        r#"{"id":1,"result":1,"error":{}}"#,
        r#"{"jsonrpc":"2.0","jsonrpc":"1.0","id":1,"method":"m"}"#,
        r#"{"method":"m","params":{"requestId":1,"requestId":2}}"#,
        r#"{"method":"m","params":{"progressToken":1,"progressToken":2}}"#,
        r#"{"id":1,"method":"m","params":{"_meta":{"progressToken":1},"_meta":{"progressToken":2}}}"#,
        r#"{"id":1,"method":"m","params":{"_meta":{"progressToken":1,"progressToken":2}}}"#,
        r#"{"id":1,"method":"m","params":{"_meta":{"progressToken":1,"progressT\u006fken":2}}}"#,
        r#"{"id":1,"method":"m","params":{"_meta":{"progressToken":null}}}"#,
        r#"{"id":1,"method":"m","params":{"_meta":null}}"#,
        r#"{"id":1,"method":"m","params":{"_meta":[]}}"#,
        r#"{"id":1,"method":"m","params":{"_meta":["t"]}}"#,
        r#"{"id":1,"method":"m","params":{"_meta":[1,2]}}"#,
        r#"{"id":1,"method":"m","params":{"_meta":"t"}}"#,
        r#"{"id":1,"method":"m","params":{"_meta":1}}"#,
        r#"{"id":1,"method":"m","params":{"_meta":{}, "_meta":"t"}}"#,
        r#"{"id":1,"method":"m","params":"x"}"#,
        r#"{"id":1,"method":"m","params":1}"#,
        r#"{"id":1,"method":"m","params":true}"#,
        r#"{"id":1,"method":"m","params":[]}"#,
        r#"{"id":1,"method":"m","params":null}"#,
        r#"{"id":1,"method":1}"#,
        r#"{"id":1,"method":null}"#,
        r#"{"id":null,"method":"m"}"#,
        r#"{"id":[1],"method":"m"}"#,
        r#"{"id":{"a":1},"result":1}"#,
        r#"{"x":"id","id":5,"result":1}"#,
        r#"{"x":["id"],"id":5,"result":1}"#,
        r#"{"x":{"id":4},"id":5,"result":1}"#,
        r#"{"id":5,"id":6,"result":1}"#,
        "{\"id\":5\x0c,\"result\":1}",
        "\x0c{\"id\":5,\"result\":1}",
        "\u{feff}{\"id\":5,\"result\":1}",
        "",
        " ",
        "[]",
        "[1,",
        "1",
        "\"x\"",
        "null",
        "true",
        "{}",
        "{} {}",
        "{}x",
    ] {
        cases.push(dup.as_bytes().to_vec());
    }
    // Invalid UTF-8 in and out of strings: a lone continuation byte, an
    // overlong encoding, an encoded surrogate, a code point past U+10FFFF,
    // a sequence cut short, bytes that never appear.
    for bad in [
        &b"\x80"[..],
        b"\xc0\xaf",
        b"\xe0\x80\xaf",
        b"\xed\xa0\x80",
        b"\xf4\x90\x80\x80",
        b"\xc3",
        b"\xe2\x82",
        b"\xff",
        b"\xfe",
    ] {
        for template in [
            &b"{\"id\":\"A\",\"method\":\"m\"}"[..],
            b"{\"id\":1,\"method\":\"A\"}",
            b"{\"id\":1,\"result\":{\"A\":1}}",
            b"{\"id\":1,\"result\":1}A",
        ] {
            let at = template.iter().position(|&b| b == b'A').unwrap_or(0);
            let mut line = template.to_vec();
            line.splice(at..at + 1, bad.iter().copied());
            cases.push(line);
        }
    }
    cases.extend(deep(100_000));
    cases
}

/// Lines nested `depth` deep in each place the envelope looks, whole and
/// not closed.
pub fn deep(depth: usize) -> Vec<Vec<u8>> {
    let arrays = ("[".repeat(depth), "]".repeat(depth));
    let objects = ("{\"a\":".repeat(depth), "}".repeat(depth));
    let mut lines = Vec::new();
    for (open, close) in [&arrays, &objects] {
        for (before, after) in [
            ("{\"id\":1,\"result\":", "}"),
            ("{\"id\":", ",\"result\":1}"),
            ("{\"method\":\"m\",\"params\":", "}"),
            ("{\"method\":\"m\",\"params\":{\"requestId\":", "}}"),
            (
                "{\"id\":1,\"method\":\"m\",\"params\":{\"_meta\":{\"progressToken\":",
                "}}}",
            ),
            ("{\"id\":1,\"method\":\"m\",\"x\":", "}"),
            ("", ""),
        ] {
            let whole = format!("{before}{open}1{close}{after}");
            lines.push(whole.into_bytes());
            let unclosed = format!("{before}{open}1{after}");
            lines.push(unclosed.into_bytes());
        }
    }
    lines
}

/// Random lines: JSON of every shape, JSON-RPC messages, the same broken
/// a little, bytes at random.
#[derive(Debug)]
pub struct Cases {
    rng: fastrand::Rng,
}

const NAMES: &[&str] = &[
    "id",
    "method",
    "params",
    "result",
    "error",
    "jsonrpc",
    "requestId",
    "progressToken",
    "_meta",
    "name",
    "arguments",
    "",
    "\\u0069d",
    "m\\u00e9",
    "\\ud800",
    "a\\\"b",
    "é",
];

const PIECES: &[&str] = &[
    "a",
    "tools/call",
    "0123456789",
    " ",
    "é",
    "😀",
    "\\\"",
    "\\\\",
    "\\/",
    "\\b",
    "\\f",
    "\\n",
    "\\r",
    "\\t",
    "\\u0000",
    "\\u00e9",
    "\\uD83D\\uDE00",
    "\\ud800",
    "\\udc00",
    "{",
    "]",
    ":",
    ",",
    "id",
    "\u{7f}",
    "\u{2028}",
];

const NUMBERS: &[&str] = &[
    "0",
    "-0",
    "7",
    "-12",
    "3.25",
    "1e5",
    "-2.5E-3",
    "6e+2",
    "0.0",
    "1e999",
    "-1E-400",
    "18446744073709551616",
    "-9223372036854775809",
    "123456789.123456789e-10",
];

impl Cases {
    pub fn new(seed: u64) -> Self {
        Self {
            rng: fastrand::Rng::with_seed(seed),
        }
    }

    /// The next line.
    pub fn next_line(&mut self) -> Vec<u8> {
        let mut line = Vec::new();
        match self.rng.u8(..20) {
            0..=2 => self.value(0, &mut line),
            3..=9 => self.message(&mut line),
            10..=14 => {
                self.message(&mut line);
                for _ in 0..1 + self.rng.usize(..3) {
                    self.mutate(&mut line);
                }
            }
            15 => {
                self.value(0, &mut line);
                self.mutate(&mut line);
            }
            16 => {
                // Bytes at random.
                line.resize(self.rng.usize(..64), 0);
                self.rng.fill(&mut line);
            }
            17 => {
                // JSON's own bytes at random.
                const ALPHABET: &[u8] = b"{}[]\",:\\ 0123-.eE+truefalsnl\"\"\"idmethod";
                for _ in 0..self.rng.usize(..48) {
                    line.push(ALPHABET[self.rng.usize(..ALPHABET.len())]);
                }
            }
            18 => {
                // A message with a byte that is not UTF-8 somewhere.
                self.message(&mut line);
                let at = self.rng.usize(..=line.len());
                let bad: &[u8] = [&b"\xff"[..], b"\xc3", b"\xed\xa0\x80", b"\x80", b"\xc0\xaf"]
                    [self.rng.usize(..5)];
                line.splice(at..at, bad.iter().copied());
            }
            _ => {
                // Nested deeper than the scan follows, now and then unclosed.
                let depth = 60 + self.rng.usize(..200);
                let mut inner = Vec::new();
                self.value(3, &mut inner);
                let (open, close) = if self.rng.bool() {
                    ("[", "]")
                } else {
                    ("{\"a\":", "}")
                };
                line.extend_from_slice(b"{\"id\":1,\"result\":");
                line.extend_from_slice(open.repeat(depth).as_bytes());
                line.extend_from_slice(&inner);
                let closed = depth - usize::from(self.rng.u8(..8) == 0);
                line.extend_from_slice(close.repeat(closed).as_bytes());
                line.push(b'}');
            }
        }
        line
    }

    /// A line for the scan of a `params` object: a message whose `params`
    /// is anything now and then, and most of the time an object whose
    /// member names repeat or hold escapes (`params` itself now and then
    /// repeated or escaped); every other one broken a little.
    pub fn next_params_line(&mut self) -> Vec<u8> {
        const PARAMS_NAMES: &[&str] = &[
            "name",
            "arguments",
            "_meta",
            "a",
            "a",
            "",
            "\\u0061",
            "\\\"q\\\"",
            "\\ud83d\\ude00",
            "\\ud800",
            "\\u00e9t\\u00e9",
            "été",
        ];
        const LINE_NAMES: &[&str] = &["params", "params", "id", "method", "par\\u0061ms"];
        let mut out = Vec::new();
        self.ws(&mut out);
        out.push(b'{');
        for i in 0..1 + self.rng.usize(..4) {
            if i > 0 {
                out.push(b',');
            }
            self.ws(&mut out);
            let name = self.pick(LINE_NAMES);
            out.push(b'"');
            out.extend_from_slice(name.as_bytes());
            out.push(b'"');
            self.ws(&mut out);
            out.push(b':');
            if name != "params" || self.rng.u8(..4) == 0 {
                self.value(1, &mut out);
                continue;
            }
            self.ws(&mut out);
            out.push(b'{');
            for j in 0..self.rng.usize(..5) {
                if j > 0 {
                    out.push(b',');
                }
                self.ws(&mut out);
                out.push(b'"');
                out.extend_from_slice(self.pick(PARAMS_NAMES).as_bytes());
                out.push(b'"');
                self.ws(&mut out);
                out.push(b':');
                self.value(2, &mut out);
            }
            self.ws(&mut out);
            out.push(b'}');
            self.ws(&mut out);
        }
        self.ws(&mut out);
        out.push(b'}');
        self.ws(&mut out);
        if self.rng.bool() {
            for _ in 0..1 + self.rng.usize(..3) {
                self.mutate(&mut out);
            }
        }
        out
    }

    fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
        from[self.rng.usize(..from.len())]
    }

    fn ws(&mut self, out: &mut Vec<u8>) {
        if self.rng.u8(..4) == 0 {
            out.extend_from_slice(
                self.pick(&[" ", "  ", "\t", "\r", "\n", " \t\r\n"])
                    .as_bytes(),
            );
        }
    }

    fn string(&mut self, out: &mut Vec<u8>) {
        let pieces = if self.rng.u8(..8) == 0 { 200 } else { 6 };
        out.push(b'"');
        for _ in 0..self.rng.usize(..pieces) {
            out.extend_from_slice(self.pick(PIECES).as_bytes());
        }
        out.push(b'"');
    }

    fn value(&mut self, depth: usize, out: &mut Vec<u8>) {
        self.ws(out);
        let kinds = if depth > 6 { 6 } else { 8 };
        match self.rng.u8(..kinds) {
            0 => out.extend_from_slice(self.pick(&["null", "true", "false"]).as_bytes()),
            1 | 2 => out.extend_from_slice(self.pick(NUMBERS).as_bytes()),
            3..=5 => self.string(out),
            6 => {
                out.push(b'[');
                for i in 0..self.rng.usize(..4) {
                    if i > 0 {
                        out.push(b',');
                    }
                    self.value(depth + 1, out);
                }
                self.ws(out);
                out.push(b']');
            }
            _ => self.object(depth + 1, out),
        }
        self.ws(out);
    }

    fn object(&mut self, depth: usize, out: &mut Vec<u8>) {
        out.push(b'{');
        for i in 0..self.rng.usize(..6) {
            if i > 0 {
                out.push(b',');
            }
            self.ws(out);
            out.push(b'"');
            out.extend_from_slice(self.pick(NAMES).as_bytes());
            out.push(b'"');
            self.ws(out);
            out.push(b':');
            self.value(depth, out);
        }
        self.ws(out);
        out.push(b'}');
    }

    /// A JSON-RPC message: a request, notification, response or error,
    /// its members in any order, now and then one repeated or odd.
    fn message(&mut self, out: &mut Vec<u8>) {
        let mut members: Vec<(&str, Vec<u8>)> = vec![("jsonrpc", b"\"2.0\"".to_vec())];
        let shape = self.rng.u8(..5);
        let id = |cases: &mut Self| {
            let mut v = Vec::new();
            match cases.rng.u8(..6) {
                0 | 1 => v.extend_from_slice(cases.rng.u64(..).to_string().as_bytes()),
                2 => cases.string(&mut v),
                3 => v.extend_from_slice(cases.pick(NUMBERS).as_bytes()),
                4 => v.extend_from_slice(b"null"),
                _ => cases.value(2, &mut v),
            }
            v
        };
        if shape != 1 {
            members.push(("id", id(self)));
        }
        if shape <= 1 {
            let mut method = Vec::new();
            if self.rng.u8(..6) == 0 {
                self.value(3, &mut method);
            } else {
                let name = self.pick(&[
                    "tools/call",
                    "notifications/cancelled",
                    "notifications/progress",
                    "ping",
                    "m\\u00e9",
                    "a\\/b",
                    "",
                ]);
                method = format!("\"{name}\"").into_bytes();
            }
            members.push(("method", method));
            let mut params = Vec::new();
            match self.rng.u8(..6) {
                0 => self.value(2, &mut params),
                _ => {
                    params.push(b'{');
                    let mut inner: Vec<(&str, Vec<u8>)> = Vec::new();
                    for name in ["requestId", "progressToken", "_meta", "name", "arguments"] {
                        if self.rng.bool() {
                            continue;
                        }
                        let mut v = Vec::new();
                        if name == "_meta" && self.rng.u8(..4) != 0 {
                            v.extend_from_slice(b"{\"progressToken\":");
                            let token = id(self);
                            v.extend_from_slice(&token);
                            if self.rng.u8(..8) == 0 {
                                v.extend_from_slice(b",\"progressToken\":1");
                            }
                            v.push(b'}');
                        } else if name == "requestId" || name == "progressToken" {
                            v = id(self);
                        } else {
                            self.value(2, &mut v);
                        }
                        inner.push((name, v));
                        if self.rng.u8(..10) == 0 {
                            let again = inner[self.rng.usize(..inner.len())].clone();
                            inner.push(again);
                        }
                    }
                    self.rng.shuffle(&mut inner);
                    for (i, (name, v)) in inner.iter().enumerate() {
                        if i > 0 {
                            params.push(b',');
                        }
                        self.ws(&mut params);
                        params.extend_from_slice(format!("\"{name}\":").as_bytes());
                        params.extend_from_slice(v);
                    }
                    params.push(b'}');
                }
            }
            if self.rng.u8(..4) != 0 {
                members.push(("params", params));
            }
        }
        if shape == 2 || shape == 4 {
            let mut result = Vec::new();
            self.value(1, &mut result);
            members.push(("result", result));
        }
        if shape == 3 || shape == 4 {
            let code = self.pick(&["-32700", "-32600", "-32010", "1"]);
            let error = format!("{{\"code\":{code},\"message\":\"x\"}}").into_bytes();
            members.push(("error", error));
        }
        for _ in 0..self.rng.usize(..3) {
            let name = self.pick(NAMES);
            let mut v = Vec::new();
            self.value(1, &mut v);
            members.push((name, v));
        }
        if self.rng.u8(..16) == 0 {
            let again = members[self.rng.usize(..members.len())].clone();
            members.push(again);
        }
        self.rng.shuffle(&mut members);
        self.ws(out);
        out.push(b'{');
        for (i, (name, v)) in members.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            self.ws(out);
            out.extend_from_slice(format!("\"{name}\"").as_bytes());
            self.ws(out);
            out.push(b':');
            self.ws(out);
            out.extend_from_slice(v);
            self.ws(out);
        }
        out.push(b'}');
        self.ws(out);
    }

    /// Breaks a line a little: a byte inserted, removed or replaced, or the
    /// line cut short.
    fn mutate(&mut self, line: &mut Vec<u8>) {
        const BYTES: &[u8] = b"\"{}[],:\\0-1eE.+ tnfu\x01\x0c\x7f\xc3\xa9\xff";
        let at = self.rng.usize(..=line.len());
        let byte = if self.rng.bool() {
            BYTES[self.rng.usize(..BYTES.len())]
        } else {
            self.rng.u8(..)
        };
        match self.rng.u8(..4) {
            0 => line.insert(at, byte),
            1 if at < line.len() => {
                line.remove(at);
            }
            2 if at < line.len() => line[at] = byte,
            _ => line.truncate(at),
        }
    }
}

/// The counts of a [`run`].
#[derive(Debug, Default, Clone, Copy)]
pub struct Counts {
    /// Lines checked.
    pub lines: u64,
    /// Of them, messages the scan read itself.
    pub scanned: u64,
    /// Messages left to serde.
    pub serde: u64,
    /// Lines refused (by both).
    pub refused: u64,
    /// Streams of lines checked through the codec.
    pub streams: u64,
}

impl Counts {
    fn add(&mut self, seen: Seen) {
        self.lines += 1;
        match seen {
            Seen::Scanned => self.scanned += 1,
            Seen::Serde => self.serde += 1,
            Seen::Refused => self.refused += 1,
        }
    }
}

/// Checks the edge cases, every single-byte change of each of [`BASES`],
/// then random lines from `seed` while `more` says to go on (it is given
/// the counts so far), and every 64 random lines a stream of them through
/// the codec. Stops at the first disagreement.
pub fn run(seed: u64, mut more: impl FnMut(&Counts) -> bool) -> Result<Counts, Disagreement> {
    let mut counts = Counts::default();
    for line in edge_cases() {
        counts.add(check(&line)?);
    }
    for base in BASES {
        let base = base.as_bytes();
        for at in 0..base.len() {
            let mut line = base.to_vec();
            line.remove(at);
            counts.add(check(&line)?);
            for byte in 0..=u8::MAX {
                line.clear();
                line.extend_from_slice(base);
                line[at] = byte;
                counts.add(check(&line)?);
            }
        }
    }
    let mut cases = Cases::new(seed);
    let mut cuts = fastrand::Rng::with_seed(seed ^ 0x5DEE_CE66);
    let mut stream = Vec::new();
    while more(&counts) {
        let line = cases.next_line();
        counts.add(check(&line)?);
        stream.push(line);
        if stream.len() == 64 {
            let max = [64, 512, 4096, 1 << 20][cuts.usize(..4)];
            framing(&stream, max, &mut cuts)?;
            counts.streams += 1;
            stream.clear();
        }
    }
    Ok(counts)
}
