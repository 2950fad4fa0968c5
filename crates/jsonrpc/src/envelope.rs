//! Peeking at the routing fields of a message without parsing its payload.

use std::borrow::Cow;
use std::ops::Range;
use std::sync::LazyLock;

use memchr::memmem;

use serde::de::IgnoredAny;
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

use crate::Raw;

/// What a message is, judged by which envelope fields it carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `method` and `id`.
    Request,
    /// `method` without `id`.
    Notification,
    /// `result` or `error` with `id`, no `method`.
    Response,
}

/// The routing fields of one JSON-RPC message, borrowed from its line.
#[derive(Debug)]
pub struct Envelope<'a> {
    pub kind: Kind,
    /// The id exactly as written (it may be `null` on an error response).
    pub id: Option<Raw<'a>>,
    pub method: Option<Cow<'a, str>>,
    /// `params.requestId` (cancellation and acknowledgement notifications).
    pub request_id: Option<Raw<'a>>,
    /// `params.progressToken` (progress notifications) or
    /// `params._meta.progressToken` (requests).
    pub progress_token: Option<Raw<'a>>,
    /// Where a response's `result` value lies in its line (byte range),
    /// when the reader knows: a peek always does; [`Spans::plain`], made
    /// for a line mcpvisor wrote, does not. `None` also for no result.
    pub result: Option<Range<usize>>,
}

/// Why a line is not a routable message.
#[derive(Debug, thiserror::Error)]
pub enum EnvelopeError {
    #[error("not valid JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("a JSON-RPC batch (array); batches were removed from MCP in 2025-06-18")]
    Batch,
    #[error("not a JSON-RPC message: {0}")]
    Invalid(&'static str),
}

#[derive(Deserialize)]
struct Wire<'a> {
    #[serde(default, borrow, deserialize_with = "present")]
    id: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "borrowed_str")]
    method: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    params: Option<ParamsPeek<'a>>,
    #[serde(default, borrow, deserialize_with = "present")]
    result: Option<&'a RawValue>,
    #[serde(default, deserialize_with = "skipped")]
    error: Option<IgnoredAny>,
}

/// A present member whose value is skipped, not kept (`null` included).
fn skipped<'de, D: Deserializer<'de>>(d: D) -> Result<Option<IgnoredAny>, D::Error> {
    IgnoredAny::deserialize(d).map(Some)
}

/// A string borrowed from the line when it has no escapes (always, for
/// method names in practice): no allocation per message.
fn borrowed_str<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Cow<'de, str>>, D::Error> {
    struct Visit;
    impl<'de> serde::de::Visitor<'de> for Visit {
        type Value = Cow<'de, str>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a string")
        }
        fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
            Ok(Cow::Borrowed(v))
        }
        fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
            Ok(Cow::Owned(v.to_owned()))
        }
    }
    d.deserialize_str(Visit).map(Some)
}

/// The `params` keys mcpvisor routes by; every other key is `Other`.
enum Key {
    RequestId,
    ProgressToken,
    Meta,
    Other,
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl serde::de::Visitor<'_> for Visit {
            type Value = Key;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a key")
            }
            fn visit_str<E>(self, v: &str) -> Result<Key, E> {
                Ok(match v {
                    "requestId" => Key::RequestId,
                    "progressToken" => Key::ProgressToken,
                    "_meta" => Key::Meta,
                    _ => Key::Other,
                })
            }
        }
        d.deserialize_identifier(Visit)
    }
}

/// The `params` members that route a message, read in the same pass as the
/// envelope. Params that are not an object (an array, say) peek as empty.
#[derive(Default)]
struct ParamsPeek<'a> {
    request_id: Option<&'a RawValue>,
    progress_token: Option<&'a RawValue>,
    meta: Option<MetaPeek<'a>>,
}

impl<'de: 'a, 'a> Deserialize<'de> for ParamsPeek<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for Visit<'a> {
            type Value = ParamsPeek<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("params")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Self::Value, A::Error> {
                let mut peek = ParamsPeek::default();
                while let Some(key) = map.next_key::<Key>()? {
                    match key {
                        Key::RequestId => peek.request_id = Some(map.next_value()?),
                        Key::ProgressToken => peek.progress_token = Some(map.next_value()?),
                        Key::Meta => peek.meta = map.next_value::<Option<MetaPeek<'a>>>()?,
                        Key::Other => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(peek)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Self::Value, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(ParamsPeek::default())
            }
            fn visit_unit<E>(self) -> Result<Self::Value, E> {
                Ok(ParamsPeek::default())
            }
        }
        d.deserialize_any(Visit(std::marker::PhantomData))
    }
}

/// `params._meta`: an object (an array, which a derived struct would take
/// as its fields in order, is refused like any other type), whose
/// `progressToken` appears at most once; `null` is no token.
struct MetaPeek<'a> {
    progress_token: Option<&'a RawValue>,
}

impl<'de: 'a, 'a> Deserialize<'de> for MetaPeek<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for Visit<'a> {
            type Value = MetaPeek<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Self::Value, A::Error> {
                let (mut progress_token, mut seen) = (None, false);
                while let Some(key) = map.next_key::<Key>()? {
                    match key {
                        Key::ProgressToken if std::mem::replace(&mut seen, true) => {
                            return Err(serde::de::Error::duplicate_field("progressToken"));
                        }
                        Key::ProgressToken => progress_token = map.next_value()?,
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(MetaPeek { progress_token })
            }
        }
        d.deserialize_map(Visit(std::marker::PhantomData))
    }
}

/// Keeps an explicit `null` as `Some("null")` instead of folding it into `None`.
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(d).map(Some)
}

/// The members of a message that routing looks at, however they were found.
#[derive(Debug, Default)]
pub(crate) struct Fields<'a> {
    pub id: Option<Raw<'a>>,
    pub method: Option<Cow<'a, str>>,
    pub params: ParamsFields<'a>,
    /// Where the `result` value lies in the line.
    pub result: Option<Range<usize>>,
    pub error: bool,
}

/// The routing members of `params`.
#[derive(Debug, Default)]
pub(crate) struct ParamsFields<'a> {
    /// `params.requestId`.
    pub request_id: Option<Raw<'a>>,
    /// `params.progressToken`.
    pub progress_token: Option<Raw<'a>>,
    /// `params._meta.progressToken`.
    pub meta_token: Option<Raw<'a>>,
}

impl<'a> Fields<'a> {
    /// The serde path: for whatever the scan leaves to it, and the reference
    /// for the scan's tests. `line` is an object, at least by its first byte.
    pub(crate) fn parse(line: &'a [u8]) -> Result<Self, EnvelopeError> {
        // One UTF-8 check of the whole line up front, so that skipping long
        // strings inside the payload does not check them again.
        let text = std::str::from_utf8(line).map_err(|_| {
            EnvelopeError::Json(<serde_json::Error as serde::de::Error>::custom(
                "the line is not valid UTF-8",
            ))
        })?;
        let wire: Wire<'a> = serde_json::from_str(text)?;
        let params = wire.params.unwrap_or_default();
        Ok(Fields {
            id: wire.id.map(Raw::from),
            method: wire.method,
            params: ParamsFields {
                request_id: params.request_id.map(Raw::from),
                progress_token: params.progress_token.map(Raw::from),
                meta_token: params.meta.and_then(|m| m.progress_token).map(Raw::from),
            },
            result: wire
                .result
                .map(|r| crate::rewrite::span_of(line, r.get().as_bytes())),
            error: wire.error.is_some(),
        })
    }

    fn envelope(self) -> Result<Envelope<'a>, EnvelopeError> {
        let kind = match (&self.method, self.id) {
            (Some(_), Some(id)) if id.is_null() => {
                return Err(EnvelopeError::Invalid("request id is null"));
            }
            (Some(_), Some(_)) => Kind::Request,
            (Some(_), None) => Kind::Notification,
            (None, Some(_)) if self.result.is_some() || self.error => Kind::Response,
            (None, _) => return Err(EnvelopeError::Invalid("no method, result or error")),
        };
        let progress_token = match kind {
            Kind::Request => self.params.meta_token,
            _ => self.params.progress_token,
        };
        Ok(Envelope {
            kind,
            id: self.id,
            method: self.method,
            request_id: self.params.request_id,
            progress_token,
            result: self.result,
        })
    }
}

impl<'a> Envelope<'a> {
    /// Reads the envelope of `line`. Payload members are skipped, not built.
    ///
    /// A line that is not valid JSON is always an [`EnvelopeError::Json`]:
    /// the structural scan that reads the usual line (`scan.rs`) only
    /// answers for lines it has checked against the whole JSON grammar, and
    /// leaves every other line to serde.
    pub fn peek(line: &'a [u8]) -> Result<Self, EnvelopeError> {
        let first = line.iter().find(|b| !b.is_ascii_whitespace());
        if first == Some(&b'[') {
            // Still insist on valid JSON so garbage gets a parse error.
            serde_json::from_slice::<&RawValue>(line)?;
            return Err(EnvelopeError::Batch);
        }
        if first != Some(&b'{') {
            serde_json::from_slice::<&RawValue>(line)?;
            return Err(EnvelopeError::Invalid("not an object"));
        }
        let fields = match crate::scan::fields(line) {
            Some(fields) => fields,
            None => Fields::parse(line)?,
        };
        fields.envelope()
    }

    /// [`Envelope::peek`], and in the same pass over the line its `params`
    /// object as [`params_object`] reads it, for a caller that edits the
    /// params of most messages it routes. The params are `None` when the
    /// scan left the line to serde (then [`params_object`] or
    /// [`raw_params`] is the way), `Some(None)` when the line has no
    /// `params` object.
    pub fn peek_with_params(line: &'a [u8]) -> Result<PeekedParams<'a>, EnvelopeError> {
        let first = line.iter().find(|b| !b.is_ascii_whitespace());
        if first == Some(&b'{') {
            if let Some((fields, params)) = crate::scan::fields_and_params(line) {
                return Ok((fields.envelope()?, Some(params)));
            }
        }
        Self::peek(line).map(|env| (env, None))
    }

    /// The method name, or `""` for a response.
    pub fn method(&self) -> &str {
        self.method.as_deref().unwrap_or("")
    }
}

/// Where the members an [`Envelope`] borrows lie in its line, as byte
/// ranges. A line handed to another task of the same process travels with
/// them, so that the task does not scan the whole line again:
/// [`Spans::envelope`] gives back, from the ranges alone, the envelope
/// [`Envelope::peek`] would read. Only the code that peeked or built the
/// line makes them, for that very line.
///
/// Each place is kept in eight bytes, so that a line and its spans move
/// about cheaply: a line with a place past 4 GiB keeps none, and its
/// envelope is then peeked again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spans {
    kind: Kind,
    fits: bool,
    id: At,
    method: At,
    request_id: At,
    progress_token: At,
    result: At,
}

/// A place in a line, or none ([`At::NONE`]), in eight bytes.
#[derive(Clone, Copy, PartialEq, Eq)]
struct At {
    start: u32,
    end: u32,
}

impl At {
    const NONE: Self = Self {
        start: u32::MAX,
        end: u32::MAX,
    };

    /// `r` as a place, and whether it fits in one.
    fn of(r: Option<Range<usize>>) -> (Self, bool) {
        let Some(r) = r else {
            return (Self::NONE, true);
        };
        match (u32::try_from(r.start), u32::try_from(r.end)) {
            (Ok(start), Ok(end)) if end < u32::MAX => (Self { start, end }, true),
            _ => (Self::NONE, false),
        }
    }

    fn get(self) -> Option<Range<usize>> {
        (self != Self::NONE).then_some(self.start as usize..self.end as usize)
    }
}

impl std::fmt::Debug for At {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.get().fmt(f)
    }
}

impl Spans {
    /// Spans of these places, kept as [`At`]s.
    fn new(
        kind: Kind,
        id: Option<Range<usize>>,
        method: Option<Range<usize>>,
        request_id: Option<Range<usize>>,
        progress_token: Option<Range<usize>>,
        result: Option<Range<usize>>,
    ) -> Self {
        let (id, a) = At::of(id);
        let (method, b) = At::of(method);
        let (request_id, c) = At::of(request_id);
        let (progress_token, d) = At::of(progress_token);
        let (result, e) = At::of(result);
        Self {
            kind,
            fits: a && b && c && d && e,
            id,
            method,
            request_id,
            progress_token,
            result,
        }
    }

    /// The spans of `env`, read from `line`. `None` when one of its members
    /// is not in `line` as it is (a method name with escapes, decoded).
    ///
    /// # Panics
    /// If a member of `env` does not borrow from `line`: a bug in the caller.
    pub fn of(line: &[u8], env: &Envelope<'_>) -> Option<Self> {
        let method = match &env.method {
            None => None,
            Some(Cow::Borrowed(m)) => Some(crate::rewrite::span_of(line, m.as_bytes())),
            Some(Cow::Owned(_)) => return None,
        };
        let span = |raw: Option<Raw<'_>>| raw.map(|r| crate::rewrite::span(line, r));
        Some(Self::new(
            env.kind,
            span(env.id),
            method,
            span(env.request_id),
            span(env.progress_token),
            env.result.clone(),
        ))
    }

    /// The spans of a request or a response that has only an id and (for
    /// a request) a method: no `params.requestId`, no progress token.
    /// `method` is where the method name lies, without its quotes.
    pub fn plain(kind: Kind, id: Range<usize>, method: Option<Range<usize>>) -> Self {
        Self::new(kind, Some(id), method, None, None, None)
    }

    /// The kind of message they are the spans of.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// Where the id lies, when it has one (and the spans hold places).
    pub fn id(&self) -> Option<Range<usize>> {
        self.id.get().filter(|_| self.fits)
    }

    /// Where a response's `result` value lies, when it has one (and the
    /// spans hold places).
    pub fn result(&self) -> Option<Range<usize>> {
        self.result.get().filter(|_| self.fits)
    }

    /// The same spans in a line that differs from theirs only in the bytes
    /// of the id, now `len` bytes long: every span after it moves.
    pub fn with_id_len(self, len: usize) -> Self {
        let Some(id) = self.id.get().filter(|_| self.fits) else {
            return self;
        };
        let (old, start) = (id.end - id.start, id.start);
        let shift = |at: At| {
            at.get().map(|r| {
                if r.start >= id.end {
                    r.start - old + len..r.end - old + len
                } else {
                    r
                }
            })
        };
        Self::new(
            self.kind,
            Some(start..start + len),
            shift(self.method),
            shift(self.request_id),
            shift(self.progress_token),
            shift(self.result),
        )
    }

    /// The envelope of `line`, whose spans these are. `None` when a span
    /// is not in `line` or does not hold what it should (a bug in whoever
    /// made the spans: the caller then peeks the line).
    pub fn envelope<'a>(&self, line: &'a [u8]) -> Option<Envelope<'a>> {
        if !self.fits {
            return None;
        }
        let raw = |at: At| -> Option<Option<Raw<'a>>> {
            match at.get() {
                None => Some(None),
                Some(r) => {
                    let text = std::str::from_utf8(line.get(r)?).ok()?;
                    Raw::recut(text).map(Some)
                }
            }
        };
        let method = match self.method.get() {
            None => None,
            Some(r) => Some(Cow::Borrowed(std::str::from_utf8(line.get(r)?).ok()?)),
        };
        Some(Envelope {
            kind: self.kind,
            id: raw(self.id)?,
            method,
            request_id: raw(self.request_id)?,
            progress_token: raw(self.progress_token)?,
            result: match self.result.get() {
                Some(r) if r.end <= line.len() => Some(r),
                Some(_) => return None,
                None => None,
            },
        })
    }
}

/// What [`Envelope::peek_with_params`] read of a line, its envelope and
/// its `params` object, kept as places in the line: a line handed to
/// another task of the same process travels with it, so that the task has
/// both back ([`Scanned::read`]) without scanning the line again, as
/// [`Spans`] spare an envelope's scan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scanned {
    spans: Spans,
    /// The length of the line read, a guard against another line.
    len: usize,
    /// `None`: the line has no `params` object.
    params: Option<ParamsAt>,
}

/// A `params` object's places: its text, and its members' and its
/// `_meta`'s members' names and values.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ParamsAt {
    text: Range<usize>,
    members: Vec<(NameAt, Range<usize>)>,
    meta: Option<Vec<(NameAt, Range<usize>)>>,
}

/// A member's name: where it lies, or, when written with escapes, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
enum NameAt {
    At(Range<usize>),
    Decoded(Box<str>),
}

impl Scanned {
    /// The places of what `peek_with_params` read of `line`: `env` and
    /// `params` as it gave them (`None`: the line has no `params` object).
    /// The members are taken over as they are, their room kept. `None`
    /// when the envelope cannot be kept as places (see [`Spans::of`]).
    ///
    /// # Panics
    /// If a member does not borrow from `line`: a bug in the caller.
    pub fn of(line: &[u8], env: &Envelope<'_>, params: Option<ParamsObject<'_>>) -> Option<Self> {
        let spans = Spans::of(line, env)?;
        let at = |members: Vec<(Cow<'_, str>, Raw<'_>)>| -> Vec<(NameAt, Range<usize>)> {
            members
                .into_iter()
                .map(|(name, value)| {
                    let name = match name {
                        Cow::Borrowed(name) => {
                            NameAt::At(crate::rewrite::span_of(line, name.as_bytes()))
                        }
                        Cow::Owned(name) => NameAt::Decoded(name.into_boxed_str()),
                    };
                    (name, crate::rewrite::span(line, value))
                })
                .collect()
        };
        let params = params.map(|p| ParamsAt {
            text: crate::rewrite::span_of(line, p.text.as_bytes()),
            members: at(p.members),
            meta: p.meta.map(at),
        });
        Some(Self {
            spans,
            len: line.len(),
            params,
        })
    }

    /// What was read of `line`, the line these places are of, as
    /// [`Envelope::peek_with_params`] gave it. `None` when `line` is not
    /// that line as far as the places can tell (then peek it).
    pub fn read(self, line: &[u8]) -> Option<PeekedParams<'_>> {
        if line.len() != self.len {
            return None;
        }
        let env = self.spans.envelope(line)?;
        let Some(params) = self.params else {
            return Some((env, Some(None)));
        };
        // One check of the object's text: its members are cut from it.
        let text = std::str::from_utf8(line.get(params.text.clone())?).ok()?;
        let start = params.text.start;
        let cut =
            |r: &Range<usize>| text.get(r.start.checked_sub(start)?..r.end.checked_sub(start)?);
        let back = |members: Vec<(NameAt, Range<usize>)>| -> Option<Vec<(Cow<'_, str>, Raw<'_>)>> {
            members
                .into_iter()
                .map(|(name, value)| {
                    let name = match name {
                        NameAt::At(r) => Cow::Borrowed(cut(&r)?),
                        NameAt::Decoded(name) => Cow::Owned(name.into_string()),
                    };
                    Some((name, Raw::checked(cut(&value)?)))
                })
                .collect()
        };
        let meta = match params.meta {
            Some(meta) => Some(back(meta)?),
            None => None,
        };
        let members = back(params.members)?;
        Some((
            env,
            Some(Some(ParamsObject {
                text,
                members,
                meta,
            })),
        ))
    }
}

/// The whole `params` member of a message, as written. This is a second pass
/// over the line, for the rare messages whose params mcpvisor keeps.
pub fn raw_params(line: &[u8]) -> Option<&RawValue> {
    #[derive(Deserialize)]
    struct Params<'a> {
        #[serde(default, borrow)]
        params: Option<&'a RawValue>,
    }
    serde_json::from_slice::<Params<'_>>(line).ok()?.params
}

/// An envelope and, when the scan read it, its line's `params` object (see
/// [`Envelope::peek_with_params`]).
pub type PeekedParams<'a> = (Envelope<'a>, Option<Option<ParamsObject<'a>>>);

/// A JSON object read by the structural scan in one pass: its text as
/// written and its members in order. A message's `params` object (read with
/// its line), or any object ([`object`]).
#[derive(Debug)]
pub struct ParamsObject<'a> {
    /// The object, from its `{` to its `}`.
    pub text: &'a str,
    /// Each member's name (borrowed when it has no escapes, decoded
    /// otherwise) and value as written, in order. A repeated name is kept
    /// as many times as it appears.
    pub members: Vec<(Cow<'a, str>, Raw<'a>)>,
    /// The members of its `_meta` object, in the same form, when the scan
    /// read them on the way: a message's `params` read with its envelope
    /// ([`Envelope::peek_with_params`]), whose `_meta` is an object given
    /// once. `None` otherwise (then read `_meta` from `members`).
    pub meta: Option<Vec<(Cow<'a, str>, Raw<'a>)>>,
}

/// The `params` object of `line`, in the structural scan behind
/// [`Envelope::peek`]: no `RawValue` is built, and each value's text is
/// JSON the scan has checked.
///
/// `Some(None)` when the line is a JSON object without a `params` object
/// (none, `null`, or a value of another type). `None` when the scan leaves
/// the line to serde: not JSON, not an object, `params` repeated, a
/// top-level member name with escapes (it could spell `params`), a member
/// name of `params` that is not a valid string (a lone surrogate escape),
/// or nesting deeper than the scan follows. Then [`raw_params`] is the way.
pub fn params_object(line: &[u8]) -> Option<Option<ParamsObject<'_>>> {
    crate::scan::params_object(line)
}

/// The integer `code` of a response's top-level `error`; `None` for a
/// result, or an error without one. The line is parsed only when an
/// `"error"` member name appears in it somewhere, and that parse builds
/// nothing but the code: the usual answer, a result, costs one search.
pub fn error_code(line: &[u8]) -> Option<i64> {
    // The searcher is built once: built for each line, it cost more than
    // the search.
    static ERROR: LazyLock<memmem::Finder<'static>> =
        LazyLock::new(|| memmem::Finder::new(b"\"error\""));
    ERROR.find(line)?;
    #[derive(Deserialize)]
    struct Answer {
        error: Option<Code>,
    }
    #[derive(Deserialize)]
    struct Code {
        code: i64,
    }
    let answer: Answer = serde_json::from_slice(line).ok()?;
    answer.error.map(|e| e.code)
}

/// The members of `text`, a whole JSON object, in the scan behind
/// [`params_object`]: the same reading for any object (a `params` member's
/// `_meta` or `arguments`, a result). `None` when `text` is not an object,
/// or when the scan leaves it to serde (a member name that is not a valid
/// string, nesting deeper than the scan follows): then serde is the way.
pub fn object(text: &str) -> Option<ParamsObject<'_>> {
    crate::scan::object(text)
}

/// Finds the top-level `"id"` of a message that may be cut short, as the head
/// of an oversize line is. Returns the id's text when it is complete.
pub fn scan_id(head: &[u8]) -> Option<&str> {
    let text = std::str::from_utf8(head).unwrap_or_else(|e| {
        // The head may end inside a multi-byte character.
        std::str::from_utf8(&head[..e.valid_up_to()]).unwrap_or_default()
    });
    let bytes = text.as_bytes();
    let mut depth = 0usize;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                let start = i;
                i = skip_string(bytes, i)?;
                // A string `"id"` that is a value, not a name, has no colon
                // after it.
                let after_colon = (depth == 1 && &text[start..i] == "\"id\"")
                    .then(|| text[i..].trim_start().strip_prefix(':'))
                    .flatten();
                if let Some(after_colon) = after_colon {
                    let offset = text.len() - after_colon.trim_start().len();
                    let end = value_end(bytes, offset)?;
                    // Only a whole JSON value: the id is written back into
                    // an error response as it is.
                    return Raw::parse(&text[offset..end]).map(Raw::get);
                }
                continue;
            }
            b'{' | b'[' => depth += 1,
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
        i += 1;
    }
    None
}

/// Index just past the string starting at `i`.
fn skip_string(bytes: &[u8], mut i: usize) -> Option<usize> {
    i += 1;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'"' => return Some(i + 1),
            _ => i += 1,
        }
    }
    None
}

/// End of a scalar id value (string or number) starting at `i`.
fn value_end(bytes: &[u8], i: usize) -> Option<usize> {
    match bytes.get(i)? {
        b'"' => skip_string(bytes, i),
        b'-' | b'0'..=b'9' => {
            let len = bytes[i..]
                .iter()
                .take_while(|b| matches!(b, b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9'))
                .count();
            // A number at the very end of the head may be cut short.
            (i + len < bytes.len()).then_some(i + len)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peek(s: &str) -> Envelope<'_> {
        Envelope::peek(s.as_bytes()).expect("valid envelope")
    }

    #[test]
    fn request_with_progress_token() {
        let env = peek(
            r#"{"jsonrpc":"2.0","id":18446744073709551616,"method":"tools/call","params":{"name":"x","_meta":{"progressToken":"t1"},"arguments":{"progressToken":9}}}"#,
        );
        assert_eq!(env.kind, Kind::Request);
        assert_eq!(env.id.map(Raw::get), Some("18446744073709551616"));
        assert_eq!(env.method(), "tools/call");
        assert_eq!(env.progress_token.map(Raw::get), Some("\"t1\""));
    }

    #[test]
    fn ids_keep_their_spelling() {
        for id in ["1", "1.0", "\"1\"", "-0", "1e3", "\"a\\u0062\""] {
            let line = format!(r#"{{"method":"m","id":{id}}}"#);
            assert_eq!(peek(&line).id.map(Raw::get), Some(id));
        }
    }

    #[test]
    fn response_in_any_key_order() {
        let env = peek(r#"{"result":{"a":[1,2]},"jsonrpc":"2.0","id":3}"#);
        assert_eq!(env.kind, Kind::Response);
        assert_eq!(env.id.map(Raw::get), Some("3"));
        let env = peek(r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"x"}}"#);
        assert_eq!(env.kind, Kind::Response);
        assert_eq!(env.id.map(Raw::get), Some("null"));
    }

    #[test]
    fn notifications_and_params_peeks() {
        let env = peek(
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"abc","reason":"x"}}"#,
        );
        assert_eq!(env.kind, Kind::Notification);
        assert_eq!(env.request_id.map(Raw::get), Some("\"abc\""));
        let env = peek(
            r#"{"method":"notifications/progress","params":{"progressToken":5,"progress":1}}"#,
        );
        assert_eq!(env.progress_token.map(Raw::get), Some("5"));
        let env = peek(r#"{"method":"notifications/m\u0065ssage","params":[1]}"#);
        assert_eq!(env.method(), "notifications/message");
    }

    #[test]
    fn rejects_what_cannot_be_routed() {
        assert!(matches!(
            Envelope::peek(b"not json"),
            Err(EnvelopeError::Json(_))
        ));
        assert!(matches!(
            Envelope::peek(b"[{\"id\":1,\"method\":\"a\"}]"),
            Err(EnvelopeError::Batch)
        ));
        assert!(matches!(
            Envelope::peek(b"[1,"),
            Err(EnvelopeError::Json(_))
        ));
        assert!(matches!(
            Envelope::peek(b"42"),
            Err(EnvelopeError::Invalid(_))
        ));
        assert!(matches!(
            Envelope::peek(b"{\"id\":1}"),
            Err(EnvelopeError::Invalid(_))
        ));
        assert!(matches!(
            Envelope::peek(b"{\"id\":null,\"method\":\"a\"}"),
            Err(EnvelopeError::Invalid(_))
        ));
        assert!(matches!(
            Envelope::peek(b"{\"id\":1,\"method\":\"a\"} x"),
            Err(EnvelopeError::Json(_))
        ));
    }

    #[test]
    fn scans_id_from_a_cut_head() {
        assert_eq!(
            scan_id(br#"{"jsonrpc":"2.0","id":42,"method":"x","params":{"id":"inner"#),
            Some("42")
        );
        assert_eq!(
            scan_id(br#"{"params":{"id":1,"a":"}"},"id":"s\"q","method"#),
            Some("\"s\\\"q\"")
        );
        assert_eq!(scan_id(br#"{"params":{"id":1},"x":"aaaa"#), None);
        assert_eq!(
            scan_id(br#"{"method":"x","id":12"#),
            None,
            "number may be cut"
        );
    }

    /// The id found is written back into an error response as it is: it
    /// must be one JSON value (found by the differential check: `00`).
    #[test]
    fn scan_id_gives_only_a_json_value() {
        for head in [
            &br#"{"id":00,"method":"m"}"#[..],
            br#"{"id":1e+-5,"method":"m"}"#,
            br#"{"id":-,"method":"m"}"#,
            b"{\"id\":\"a\x01b\",\"method\":\"m\"}",
            br#"{"id":"\q","method":"m"}"#,
        ] {
            assert_eq!(scan_id(head), None, "{}", String::from_utf8_lossy(head));
        }
        // A value spelled "id" is not the member.
        assert_eq!(scan_id(br#"{"x":"id","id":5,"method":"m"}"#), Some("5"));
    }

    /// `_meta` is an object or null: an array is refused as any other type
    /// is, not read as the fields of a struct in order (found by the
    /// differential check: `"_meta":["t"]` gave the token "t").
    #[test]
    fn a_meta_that_is_not_an_object_is_refused() {
        for meta in ["[]", "[\"t\"]", "\"t\"", "1"] {
            let line = format!(r#"{{"id":1,"method":"m","params":{{"_meta":{meta}}}}}"#);
            assert!(
                matches!(Envelope::peek(line.as_bytes()), Err(EnvelopeError::Json(_))),
                "{line}"
            );
        }
        let env = peek(r#"{"id":1,"method":"m","params":{"_meta":null}}"#);
        assert_eq!(env.progress_token, None);
    }

    /// What routing sees of an envelope, owned, for comparisons.
    fn seen(env: &Envelope<'_>) -> (Kind, Vec<Option<String>>) {
        let raw = |r: Option<Raw<'_>>| r.map(|r| r.get().to_owned());
        (
            env.kind,
            vec![
                raw(env.id),
                env.method.as_deref().map(str::to_owned),
                raw(env.request_id),
                raw(env.progress_token),
            ],
        )
    }

    const LINES: &[&str] = &[
        r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"a","arguments":{"s":"x"}}}"#,
        r#"{"jsonrpc":"2.0","id":"abc","method":"tools/call","params":{"_meta":{"progressToken":"t-1"},"name":"a"}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":12,"reason":"x"}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":3,"progress":1}}"#,
        r#"{"jsonrpc":"2.0","id":123456,"result":{"content":[{"type":"text","text":"{\"s\":1}"}]}}"#,
        r#"{"id":null,"error":{"code":-32700,"message":"x"},"jsonrpc":"2.0"}"#,
        r#" { "method" : "ping" , "id" : 1.5e3 } "#,
    ];

    #[test]
    fn spans_give_back_the_envelope_peek_reads() {
        for line in LINES {
            let env = peek(line);
            let spans = Spans::of(line.as_bytes(), &env).expect("spans");
            let again = spans
                .envelope(line.as_bytes())
                .expect("envelope from spans");
            assert_eq!(seen(&again), seen(&env), "{line}");
        }
    }

    /// What a scan read, as text: the envelope's members and every member
    /// of the params and of their `_meta`.
    fn read_as_text(peeked: &PeekedParams<'_>) -> String {
        let (env, params) = peeked;
        format!("{:?} {params:?}", seen(env))
    }

    #[test]
    fn a_scan_handed_on_reads_back_as_the_scan_of_the_line() {
        let more = [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"s":"x"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"progressToken":4}}}"#,
            r#"{"id":2,"method":"m","params":{"n\u0061me":"a","k":[1,{"a":null}],"_meta":{"x\u0079":"\u00e9"}}}"#,
            r#"{"id":3,"method":"m","params":{}}"#,
            r#"{"id":4,"method":"m"}"#,
            r#"{"id":5,"method":"m","params":[1,2]}"#,
            "{\"id\":6,\"method\":\"m\",\"params\":{\"t\":\"\u{e9}\u{1f600}\"}}",
        ];
        // As the envelope's scan reads a line, or, where it leaves the line
        // to serde (a member name with escapes), as `params_object` does,
        // which decodes such names: `Scanned` keeps either.
        fn scanned_by_either(line: &[u8]) -> Option<(Envelope<'_>, Option<ParamsObject<'_>>)> {
            match Envelope::peek_with_params(line).expect("valid") {
                (env, Some(params)) => Some((env, params)),
                (env, None) => Some((env, params_object(line)?)),
            }
        }
        let mut handed_on = Vec::new();
        for line in LINES.iter().copied().chain(more) {
            let bytes = line.as_bytes();
            let Some((env, params)) = scanned_by_either(bytes) else {
                continue;
            };
            handed_on.push(line);
            let scanned = Scanned::of(bytes, &env, params).expect("places");
            let again = scanned.clone().read(bytes).expect("read back");
            let (env, params) = scanned_by_either(bytes).expect("read");
            assert_eq!(
                read_as_text(&again),
                read_as_text(&(env, Some(params))),
                "{line}"
            );
            // Another line is not read as this one.
            let longer = format!("{line} ");
            assert!(scanned.read(longer.as_bytes()).is_none(), "{line}");
        }
        // The lines made to try it (a decoded name, `_meta`, non-ASCII
        // text, no params) were each handed on and read back.
        for line in more {
            assert!(handed_on.contains(&line), "not handed on: {line}");
        }
    }

    #[test]
    fn spans_follow_an_id_of_another_length() {
        for line in LINES {
            let env = peek(line);
            let Some(id) = env.id else { continue };
            let spans = Spans::of(line.as_bytes(), &env).expect("spans");
            for new_id in ["1", "\"a-much-longer-id-than-before\""] {
                let spliced = crate::rewrite::splice(line.as_bytes(), id, new_id.as_bytes());
                let moved = spans.clone().with_id_len(new_id.len());
                let from_spans = moved.envelope(&spliced).expect("envelope from spans");
                let peeked = Envelope::peek(&spliced).expect("valid");
                assert_eq!(seen(&from_spans), seen(&peeked), "{line} with id {new_id}");
            }
        }
    }

    #[test]
    fn spans_that_do_not_fit_the_line_give_nothing() {
        let line = br#"{"jsonrpc":"2.0","id":7,"result":{}}"#;
        assert!(
            Spans::plain(Kind::Response, 30..60, None)
                .envelope(line)
                .is_none()
        );
        // A span that holds no JSON value.
        assert!(
            Spans::plain(Kind::Response, 0..3, None)
                .envelope(line)
                .is_none()
        );
        let good = Spans::plain(Kind::Response, 22..23, None)
            .envelope(line)
            .expect("fits");
        assert_eq!(good.id.map(Raw::get), Some("7"));
    }

    #[test]
    fn spans_with_a_place_past_four_gib_keep_none_and_give_nothing() {
        let line = br#"{"jsonrpc":"2.0","id":7,"result":{}}"#;
        let far = 1usize << 32;
        let spans = Spans::plain(Kind::Request, 22..23, Some(far..far + 4));
        assert!(spans.envelope(line).is_none());
        // Nor once moved for an id of another length.
        assert!(spans.with_id_len(2).envelope(line).is_none());
        // Places that fit are kept as they were given.
        let near = Spans::plain(Kind::Request, 22..23, Some(1..5));
        assert_eq!(near.clone().with_id_len(1), near);
    }

    #[test]
    fn an_answer_gives_its_error_code_only_from_its_own_error() {
        let code = |line: &str| error_code(line.as_bytes());
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"x"}}"#),
            Some(-32601)
        );
        assert_eq!(
            code(r#"{"error":{"message":"x","data":{"error":1},"code":7},"id":1}"#),
            Some(7)
        );
        // A result that speaks of errors is not one.
        assert_eq!(
            code(r#"{"id":1,"result":{"error":{"code":3},"text":"\"error\""}}"#),
            None
        );
        assert_eq!(code(r#"{"id":1,"result":{}}"#), None);
        assert_eq!(code(r#"{"id":1,"error":{"code":"x"}}"#), None);
        assert_eq!(code(r#"{"id":1,"error":"#), None);
    }
}
