//! The checks a 2026-07-28 request passes before the hub sees it.
//!
//! A request of that era carries no session: its protocol version and the
//! client's capabilities come in `params._meta`, and the transport mirrors
//! the version, the method and (for a named operation) the name into the
//! `MCP-Protocol-Version`, `Mcp-Method` and `Mcp-Name` headers, so that
//! intermediaries can route on them. The front refuses, with status 400 and
//! the revision's error, a request whose `_meta` is not valid (-32602),
//! whose headers are missing or disagree with its body (-32020), or whose
//! version it does not speak (-32022, with the versions it does). Methods
//! the revision removed get 404 and -32601, as does any method nobody
//! implements (see [`status_of`]).

#![expect(
    clippy::result_large_err,
    reason = "a refusal is the response to send; it is built once per request, not moved around"
)]

use std::borrow::Cow;

use axum::http::header::HeaderName;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use base64::Engine as _;
use mcpvisor_jsonrpc::envelope::{ParamsObject, raw_params};
use mcpvisor_jsonrpc::{INVALID_PARAMS, METHOD_NOT_FOUND, Raw, build};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::server::{PROTOCOL_VERSION, VERSIONS, header_str, json_response};

/// The modern protocol revisions this front serves without a session.
pub(crate) const MODERN: [&str; 1] = ["2026-07-28"];

/// A header disagrees with the body, or a required one is missing.
pub(crate) const HEADER_MISMATCH: i64 = -32020;
/// The client lacks a capability the request needs.
pub(crate) const MISSING_CAPABILITY: i64 = -32021;
/// The requested protocol version is not spoken here.
pub(crate) const UNSUPPORTED_VERSION: i64 = -32022;

static METHOD: HeaderName = HeaderName::from_static("mcp-method");
static NAME: HeaderName = HeaderName::from_static("mcp-name");

/// Methods of the handshake era that 2026-07-28 removed.
const REMOVED: [&str; 6] = [
    "initialize",
    "ping",
    "logging/setLevel",
    "resources/subscribe",
    "resources/unsubscribe",
    "tasks/list",
];

/// The `_meta` key of the protocol version.
const META_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
/// The `_meta` key of the client's capabilities.
const META_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";

/// The `_meta` members of the request envelope, when serde reads them.
#[derive(Deserialize)]
struct MetaFields<'a> {
    #[serde(rename = "io.modelcontextprotocol/protocolVersion", borrow)]
    version: Option<&'a RawValue>,
    #[serde(rename = "io.modelcontextprotocol/clientCapabilities", borrow)]
    capabilities: Option<&'a RawValue>,
}

/// The `_meta` members of the request envelope, each as written (`null`
/// as absent).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Meta<'a> {
    version: Option<&'a str>,
    capabilities: Option<&'a str>,
}

impl<'a> Meta<'a> {
    /// Reads `meta`; `None` when it is not an object, or repeats a member
    /// read. Read by the structural scan that reads messages, serde only
    /// for what the scan leaves to it; both read it alike.
    fn read(meta: &'a str) -> Option<Self> {
        Self::of(meta, None)
    }

    /// [`Meta::read`], from `kept` when given: the members of `meta` as
    /// the envelope's scan read them on its way (see
    /// [`ParamsObject::meta`]), for `meta` not to be read again.
    fn of(meta: &'a str, kept: Option<&[(Cow<'a, str>, Raw<'a>)]>) -> Option<Self> {
        let read;
        let members = match kept {
            Some(members) => members,
            None => match mcpvisor_jsonrpc::envelope::object(meta) {
                Some(object) => {
                    read = object;
                    &read.members[..]
                }
                None => return Self::by_serde(meta),
            },
        };
        let (mut version, mut capabilities) = (None, None);
        for (key, value) in members {
            let slot = match key.as_ref() {
                META_VERSION => &mut version,
                META_CAPABILITIES => &mut capabilities,
                _ => continue,
            };
            if slot.replace(*value).is_some() {
                return None;
            }
        }
        let present = |v: Option<Raw<'a>>| v.filter(|v| !v.is_null()).map(|v| v.get());
        Some(Self {
            version: present(version),
            capabilities: present(capabilities),
        })
    }

    /// [`Meta::read`] for what the scan leaves to serde.
    fn by_serde(meta: &'a str) -> Option<Self> {
        {
            let fields = serde_json::from_str::<MetaFields<'_>>(meta).ok()?;
            Some(Self {
                version: fields.version.map(RawValue::get),
                capabilities: fields.capabilities.map(RawValue::get),
            })
        }
    }
}

/// A sessionless request's `params`, as far as the checks read them: the
/// members `_meta`, `name` and `uri`, each as written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Params<'a> {
    /// None, or `null`.
    Missing,
    /// Not an object, or one that repeats a member the checks read.
    NotObject,
    Object {
        meta: Option<&'a str>,
        name: Option<&'a str>,
        uri: Option<&'a str>,
    },
}

/// The members of `params` the checks read, when serde reads them.
#[derive(Deserialize)]
struct Fields<'a> {
    #[serde(rename = "_meta", borrow)]
    meta: Option<&'a RawValue>,
    #[serde(borrow)]
    name: Option<&'a RawValue>,
    #[serde(borrow)]
    uri: Option<&'a RawValue>,
}

impl<'a> Params<'a> {
    /// The params of `line`: from the object the envelope's scan read
    /// (`scanned`, see `Envelope::peek_with_params`), or, for a line the
    /// scan left to serde or one without a params object, from serde.
    pub(crate) fn of(line: &'a [u8], scanned: Option<&Option<ParamsObject<'a>>>) -> Self {
        if let Some(Some(object)) = scanned {
            return Self::members(object);
        }
        let Some(params) = raw_params(line) else {
            return Self::Missing;
        };
        match serde_json::from_str::<Fields<'_>>(params.get()) {
            Ok(f) => Self::Object {
                meta: f.meta.map(RawValue::get),
                name: f.name.map(RawValue::get),
                uri: f.uri.map(RawValue::get),
            },
            Err(_) => Self::NotObject,
        }
    }

    /// The members the checks read, from a scanned object. A member given
    /// twice makes it no object the checks take, as serde would refuse it.
    fn members(object: &ParamsObject<'a>) -> Self {
        let (mut meta, mut name, mut uri) = (None, None, None);
        for (key, value) in &object.members {
            let slot = match key.as_ref() {
                "_meta" => &mut meta,
                "name" => &mut name,
                "uri" => &mut uri,
                _ => continue,
            };
            if slot.replace(value.get()).is_some() {
                return Self::NotObject;
            }
        }
        Self::Object { meta, name, uri }
    }
}

/// Whether a sessionless request is of the modern era: its `_meta` names a
/// protocol version (no handshake-era request carries one), or its
/// `MCP-Protocol-Version` header names no handshake-era revision. Such a
/// request is checked by [`check`]; any other goes the way of the
/// handshake era.
///
/// Also returns the `_meta` when it was read on the way (`Some(None)`: it
/// is not an object the checks take), for [`check`] not to read it again.
///
/// `kept`: the members of `_meta` as the envelope's scan read them, when it
/// did ([`ParamsObject::meta`]).
pub(crate) fn is_modern<'a>(
    headers: &HeaderMap,
    params: &Params<'a>,
    kept: Option<&[(Cow<'a, str>, Raw<'a>)]>,
) -> (bool, Option<Option<Meta<'a>>>) {
    let header = header_str(headers, &PROTOCOL_VERSION);
    let by_header = header.is_some_and(|v| !VERSIONS.contains(&v) || MODERN.contains(&v));
    match params {
        Params::Object {
            meta: Some(meta), ..
        } => {
            let meta = Meta::of(meta, kept);
            (
                by_header || meta.is_some_and(|m| m.version.is_some()),
                Some(meta),
            )
        }
        _ => (by_header, None),
    }
}

/// Checks a modern request (`id` as written) in the order the revision
/// gives: its `_meta`, its protocol version header against the body, the
/// version, then `Mcp-Method` and `Mcp-Name`, then whether the method still
/// exists. A refusal is the response to send.
///
/// `read`: the `_meta` as [`is_modern`] read it, when it did.
pub(crate) fn check<'a>(
    headers: &HeaderMap,
    id: &str,
    method: &str,
    params: &Params<'a>,
    read: Option<Option<Meta<'a>>>,
) -> Result<(), Response> {
    let invalid = |message: &str| {
        Err(refusal(
            StatusCode::BAD_REQUEST,
            id,
            INVALID_PARAMS,
            message,
            None,
        ))
    };
    let (meta, name, uri) = match *params {
        Params::Missing => return invalid("a 2026-07-28 request needs params with _meta"),
        Params::NotObject => return invalid("params must be an object"),
        Params::Object { meta, name, uri } => (meta, name, uri),
    };
    let Some(meta) = meta else {
        return invalid(
            "params._meta is missing: a 2026-07-28 request carries its protocol version and client capabilities there",
        );
    };
    let Some(meta) = read.unwrap_or_else(|| Meta::read(meta)) else {
        return invalid("params._meta must be an object");
    };
    let Some(version) = meta.version.and_then(as_str) else {
        return invalid("params._meta needs io.modelcontextprotocol/protocolVersion, a string");
    };
    if !meta.capabilities.is_some_and(|c| c.starts_with('{')) {
        return invalid("params._meta needs io.modelcontextprotocol/clientCapabilities, an object");
    }
    let mismatch = |message: String| {
        Err(refusal(
            StatusCode::BAD_REQUEST,
            id,
            HEADER_MISMATCH,
            &format!("Header mismatch: {message}"),
            None,
        ))
    };
    match header_str(headers, &PROTOCOL_VERSION) {
        None => return mismatch("the MCP-Protocol-Version header is missing".to_owned()),
        Some(h) if h != version => {
            return mismatch(format!(
                "MCP-Protocol-Version header value '{h}' does not match body value '{version}'"
            ));
        }
        Some(_) => {}
    }
    if !MODERN.contains(&version.as_ref()) {
        let data = serde_json::json!({
            "supported": VERSIONS.iter().rev().collect::<Vec<_>>(),
            "requested": version,
        });
        return Err(refusal(
            StatusCode::BAD_REQUEST,
            id,
            UNSUPPORTED_VERSION,
            "Unsupported protocol version",
            Some(&data),
        ));
    }
    match header_str(headers, &METHOD) {
        None => return mismatch("the Mcp-Method header is missing".to_owned()),
        Some(h) if h != method => {
            return mismatch(format!(
                "Mcp-Method header value '{h}' does not match body value '{method}'"
            ));
        }
        Some(_) => {}
    }
    let named = match method {
        "tools/call" | "prompts/get" => Some(("params.name", name)),
        "resources/read" => Some(("params.uri", uri)),
        _ => None,
    };
    if let Some((field, value)) = named {
        let Some(value) = value.and_then(as_str) else {
            return invalid(&format!("{method} needs {field}, a string"));
        };
        let Some(header) = headers.get(&NAME) else {
            return mismatch("the Mcp-Name header is missing".to_owned());
        };
        match header.to_str().ok().and_then(decode) {
            Some(h) if h == value => {}
            Some(h) => {
                return mismatch(format!(
                    "Mcp-Name header value '{h}' does not match body value '{value}'"
                ));
            }
            None => return mismatch("the Mcp-Name header is not valid".to_owned()),
        }
    }
    if REMOVED.contains(&method) {
        return Err(refusal(
            StatusCode::NOT_FOUND,
            id,
            METHOD_NOT_FOUND,
            &format!("Method not found: {method} (removed in 2026-07-28)"),
            None,
        ));
    }
    Ok(())
}

/// The HTTP status of a modern request's error answer: 404 for a method
/// nobody implements, 400 for the revision's own refusals, else 200.
pub(crate) fn status_of(line: &[u8]) -> StatusCode {
    match mcpvisor_jsonrpc::envelope::error_code(line) {
        Some(METHOD_NOT_FOUND) => StatusCode::NOT_FOUND,
        Some(HEADER_MISMATCH | MISSING_CAPABILITY | UNSUPPORTED_VERSION) => StatusCode::BAD_REQUEST,
        _ => StatusCode::OK,
    }
}

/// A JSON string's value, or `None` for any other JSON value. `raw` is
/// JSON already checked: quoted and without a backslash, it is its own
/// contents.
fn as_str(raw: &str) -> Option<Cow<'_, str>> {
    match raw.strip_prefix('"').and_then(|r| r.strip_suffix('"')) {
        Some(inner) if !inner.contains('\\') => Some(Cow::Borrowed(inner)),
        _ => serde_json::from_str::<Cow<'_, str>>(raw).ok(),
    }
}

/// A header value as its sender meant it: the Base64 sentinel form
/// (`=?base64?...?=`) decoded, any other value as it is.
fn decode(value: &str) -> Option<Cow<'_, str>> {
    match value
        .strip_prefix("=?base64?")
        .and_then(|v| v.strip_suffix("?="))
    {
        Some(encoded) => {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .ok()?;
            String::from_utf8(bytes).ok().map(Cow::Owned)
        }
        None => Some(Cow::Borrowed(value)),
    }
}

fn refusal(
    status: StatusCode,
    id: &str,
    code: i64,
    message: &str,
    data: Option<&serde_json::Value>,
) -> Response {
    json_response(status, build::error(id, code, message, data))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meta_kept_by_the_envelope_scan_reads_as_meta_read_again() {
        for line in [
            r#"{"id":1,"method":"tools/call","params":{"name":"a","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}"#,
            r#"{"id":1,"method":"m","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":null}}}"#,
            r#"{"id":1,"method":"m","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"a","io.modelcontextprotocol/protocolVersion":"b"}}}"#,
            r#"{"id":1,"method":"m","params":{"_meta":{}}}"#,
        ] {
            let (_, scanned) =
                mcpvisor_jsonrpc::Envelope::peek_with_params(line.as_bytes()).expect("an envelope");
            let params = scanned.flatten().expect("params");
            let kept = params.meta.as_deref().expect("kept");
            let Params::Object {
                meta: Some(meta), ..
            } = Params::members(&params)
            else {
                panic!("{line}");
            };
            assert_eq!(Meta::of(meta, Some(kept)), Meta::read(meta), "{line}");
        }
    }

    #[test]
    fn base64_names_are_decoded() {
        assert_eq!(decode("get_weather").as_deref(), Some("get_weather"));
        assert_eq!(
            decode("=?base64?SGVsbG8sIOS4lueVjA==?=").as_deref(),
            Some("Hello, 世界")
        );
        assert_eq!(decode("=?base64?not base64!?="), None);
    }

    /// The params of `line` both ways: from the envelope's scan, and from
    /// serde alone (as for a line the scan leaves to serde).
    fn both(line: &str) -> (Params<'_>, Params<'_>) {
        let (_, scanned) =
            mcpvisor_jsonrpc::Envelope::peek_with_params(line.as_bytes()).expect("an envelope");
        let scanned = Params::of(line.as_bytes(), scanned.as_ref());
        let serde = Params::of(line.as_bytes(), None);
        (scanned, serde)
    }

    #[test]
    fn params_read_from_the_scan_are_those_serde_reads() {
        let line = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"arguments":{"s":"x"},"name":"echo","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#;
        let (scanned, serde) = both(line);
        assert_eq!(scanned, serde);
        assert_eq!(
            scanned,
            Params::Object {
                meta: Some(r#"{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}"#),
                name: Some(r#""echo""#),
                uri: None,
            }
        );
        // A member name with an escape is the member it spells.
        let line = r#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"\u0075ri":"file:///a"}}"#;
        let (scanned, serde) = both(line);
        assert_eq!(scanned, serde);
        assert!(matches!(scanned, Params::Object { uri: Some(_), .. }));
        for (line, expected) in [
            (r#"{"jsonrpc":"2.0","id":1,"method":"x"}"#, Params::Missing),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"x","params":null}"#,
                Params::Missing,
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"x","params":[1]}"#,
                Params::NotObject,
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"x","params":{"name":"a","name":"b"}}"#,
                Params::NotObject,
            ),
        ] {
            let (scanned, serde) = both(line);
            assert_eq!(scanned, expected, "{line}");
            assert_eq!(serde, expected, "{line}");
        }
    }

    #[test]
    fn meta_read_by_the_scan_is_what_serde_reads() {
        fn serde(meta: &str) -> Option<Meta<'_>> {
            serde_json::from_str::<MetaFields<'_>>(meta)
                .ok()
                .map(|f| Meta {
                    version: f.version.map(RawValue::get),
                    capabilities: f.capabilities.map(RawValue::get),
                })
        }
        for meta in [
            r#"{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}"#,
            r#"{ "io.modelcontextprotocol/protocolVersion" : "2026-07-28" , "x" : [1, {"a": null}] }"#,
            r#"{"io.modelcontextprotocol/protocolVersion":null,"io.modelcontextprotocol/clientCapabilities":null}"#,
            r#"{"io.modelcontextprotocol/protocolVersion":1,"io.modelcontextprotocol/clientCapabilities":[]}"#,
            r#"{"io.modelcontextprotocol/protocolVersion":"a","io.modelcontextprotocol/protocolVersion":"b"}"#,
            r#"{"io.modelcontextprotocol\/protocolVersion":"2026-07-28"}"#,
            r#"{}"#,
            r#"[]"#,
            r#""x""#,
            r#"{"a":"#,
        ] {
            assert_eq!(Meta::read(meta), serde(meta), "{meta}");
        }
    }

    #[test]
    fn error_answers_get_the_revision_status() {
        let err = |code: i64| build::error("1", code, "x", None);
        assert_eq!(status_of(&err(-32601)), StatusCode::NOT_FOUND);
        assert_eq!(status_of(&err(-32021)), StatusCode::BAD_REQUEST);
        assert_eq!(status_of(&err(-32602)), StatusCode::OK);
        assert_eq!(status_of(&build::result("1", "{}")), StatusCode::OK);
    }
}
