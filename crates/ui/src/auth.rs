//! Who may use the UI, and the headers every answer carries.
//!
//! A request is authenticated by `Authorization: Bearer TOKEN` (curl,
//! `mcpvisor status`) or by the `mcpvisor_ui` cookie (the page), which
//! `GET /?token=TOKEN` sets (HttpOnly, SameSite=Strict) before redirecting
//! the token out of the address bar. Tokens are compared as the HTTP
//! front compares its own ([`mcpvisor_http::BearerToken`]): in constant
//! time, by their SHA-256 digests.
//!
//! A change (POST, PUT, DELETE) is refused when it carries an `Origin` that
//! is not the UI's own. One authenticated by the cookie must also carry the
//! page's CSRF token in `X-CSRF-Token` and an `Origin`: SameSite already
//! keeps other sites' requests from carrying the cookie; the two checks
//! hold even where it does not.

use std::fmt;

use axum::http::{HeaderMap, HeaderValue, Method, header};
use mcpvisor_http::BearerToken;

/// The cookie the page authenticates with.
pub const COOKIE: &str = "mcpvisor_ui";
/// The header a change made by the page carries its CSRF token in.
pub const CSRF_HEADER: &str = "x-csrf-token";

/// The Content-Security-Policy of every answer: the page's own script and
/// style only, no inline code, no framing, no other origin.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// A secret string compared in constant time; `Debug` prints `***`.
#[derive(Clone)]
pub struct Token {
    text: String,
    check: BearerToken,
}

/// How a request proved it may be served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proof {
    Bearer,
    Cookie,
}

// === impl Token ===

impl Token {
    /// `text` as the token (from `--auth-token-file`).
    pub fn new(text: impl Into<String>) -> Self {
        let text = text.into();
        let check = BearerToken::new(&text);
        Self { text, check }
    }

    /// A fresh token of 32 random bytes, as hex.
    pub fn random() -> Result<Self, getrandom::Error> {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes)?;
        Ok(Self::new(
            bytes.iter().map(|b| format!("{b:02x}")).collect::<String>(),
        ))
    }

    /// Whether `presented` is this token, in time independent of both.
    pub fn matches(&self, presented: &str) -> bool {
        self.check.matches(presented)
    }

    /// The token's text, for the link printed at start and the runtime
    /// file; nothing else should need it.
    pub fn expose(&self) -> &str {
        &self.text
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(***)")
    }
}

// === the checks ===

/// The token a request presents, and how.
pub fn presented(headers: &HeaderMap) -> Option<(&str, Proof)> {
    if let Some(token) = mcpvisor_http::bearer(headers) {
        return Some((token, Proof::Bearer));
    }
    cookie(headers, COOKIE).map(|token| (token, Proof::Cookie))
}

/// The value of cookie `name`.
fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|h| h.to_str().ok())
        .flat_map(|h| h.split(';'))
        .find_map(|pair| {
            let (key, value) = pair.trim().split_once('=')?;
            (key == name).then_some(value)
        })
}

/// Whether `method` changes something.
pub fn is_change(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD)
}

/// Why a change is refused, or `None` when it may go on.
/// `csrf` is the page's token (`None`: there is none, and a change made
/// with the cookie is always refused).
pub fn refuse_change(
    headers: &HeaderMap,
    proof: Proof,
    csrf: Option<&Token>,
) -> Option<&'static str> {
    let origin = headers.get(header::ORIGIN).and_then(|o| o.to_str().ok());
    let own = own_origin(headers);
    if let Some(origin) = origin {
        if own.as_deref() != Some(origin) {
            return Some("a change from another origin is refused");
        }
    }
    if proof == Proof::Cookie {
        if origin.is_none() {
            return Some("a change made with the cookie must carry an Origin header");
        }
        let sent = headers.get(CSRF_HEADER).and_then(|h| h.to_str().ok());
        let matches = match (sent, csrf) {
            (Some(sent), Some(csrf)) => csrf.matches(sent),
            _ => false,
        };
        if !matches {
            return Some("a change made with the cookie must carry the page's X-CSRF-Token");
        }
    }
    None
}

/// `http://HOST` from the request's `Host` header: the UI's own origin as
/// the browser sees it.
fn own_origin(headers: &HeaderMap) -> Option<String> {
    let host = headers.get(header::HOST)?.to_str().ok()?;
    Some(format!("http://{host}"))
}

/// Whether `Host` names this machine (on a loopback listener nothing else
/// is answered, so a DNS-rebound name cannot reach the UI).
pub fn loopback_host(headers: &HeaderMap) -> bool {
    let Some(host) = headers.get(header::HOST).and_then(|h| h.to_str().ok()) else {
        return false;
    };
    let name = match host.rsplit_once(':') {
        // `[::1]:8809`, `localhost:8809`; a bare `::1` has no brackets.
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    };
    let name = name.to_ascii_lowercase();
    name == "localhost"
        || name == "[::1]"
        || name
            .parse::<std::net::Ipv4Addr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The `Set-Cookie` value that keeps `token` in the browser.
pub fn set_cookie(token: &str) -> Option<HeaderValue> {
    HeaderValue::from_str(&format!(
        "{COOKIE}={token}; HttpOnly; SameSite=Strict; Path=/"
    ))
    .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.append(*k, HeaderValue::from_str(v).expect("header value"));
        }
        map
    }

    #[test]
    fn tokens_match_only_themselves() {
        let t = Token::new("abc");
        assert!(t.matches("abc"));
        assert!(!t.matches("abd"));
        assert!(!t.matches("ab"));
        assert!(!t.matches(""));
        assert_eq!(format!("{t:?}"), "Token(***)");
        let r = Token::random().expect("random");
        assert_eq!(r.expose().len(), 64);
        assert_ne!(r.expose(), Token::random().expect("random").expose());
    }

    #[test]
    fn bearer_wins_over_cookie() {
        let h = headers(&[
            ("cookie", "a=b; mcpvisor_ui=fromcookie"),
            ("authorization", "Bearer frombearer"),
        ]);
        assert_eq!(presented(&h), Some(("frombearer", Proof::Bearer)));
        let h = headers(&[("cookie", "a=b; mcpvisor_ui=fromcookie")]);
        assert_eq!(presented(&h), Some(("fromcookie", Proof::Cookie)));
        assert_eq!(presented(&headers(&[("cookie", "x=y")])), None);
    }

    #[test]
    fn changes_need_origin_and_csrf_with_the_cookie() {
        let csrf = Token::new("c");
        let own = [("host", "127.0.0.1:9"), ("origin", "http://127.0.0.1:9")];
        let mut ok = own.to_vec();
        ok.push(("x-csrf-token", "c"));
        assert_eq!(
            refuse_change(&headers(&ok), Proof::Cookie, Some(&csrf)),
            None
        );
        assert!(refuse_change(&headers(&own), Proof::Cookie, Some(&csrf)).is_some());
        assert!(
            refuse_change(
                &headers(&[("host", "127.0.0.1:9"), ("x-csrf-token", "c")]),
                Proof::Cookie,
                Some(&csrf)
            )
            .is_some()
        );
        let foreign = [
            ("host", "127.0.0.1:9"),
            ("origin", "http://evil.example"),
            ("x-csrf-token", "c"),
        ];
        assert!(refuse_change(&headers(&foreign), Proof::Cookie, Some(&csrf)).is_some());
        // A bearer needs no CSRF token, but a foreign Origin is still refused.
        assert_eq!(
            refuse_change(&headers(&[("host", "h:1")]), Proof::Bearer, Some(&csrf)),
            None
        );
        assert!(refuse_change(&headers(&foreign), Proof::Bearer, Some(&csrf)).is_some());
        // Without a CSRF token of its own the page cannot change anything.
        assert!(refuse_change(&headers(&ok), Proof::Cookie, None).is_some());
        let empty = [
            ("host", "127.0.0.1:9"),
            ("origin", "http://127.0.0.1:9"),
            ("x-csrf-token", ""),
        ];
        assert!(refuse_change(&headers(&empty), Proof::Cookie, None).is_some());
    }

    #[test]
    fn loopback_hosts() {
        for ok in [
            "127.0.0.1:8809",
            "localhost:1",
            "LOCALHOST",
            "[::1]:80",
            "127.0.0.2",
        ] {
            assert!(loopback_host(&headers(&[("host", ok)])), "{ok}");
        }
        for bad in ["evil.example:8809", "10.0.0.1", "127.0.0.1.evil.example"] {
            assert!(!loopback_host(&headers(&[("host", bad)])), "{bad}");
        }
        assert!(!loopback_host(&HeaderMap::new()));
    }
}
