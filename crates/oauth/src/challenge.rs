//! The `WWW-Authenticate: Bearer` challenge of a 401 or 403 (RFC 6750
//! section 3, RFC 9728 section 5.1).

use reqwest::header::{HeaderMap, WWW_AUTHENTICATE};

/// What a server's challenge asks for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Challenge {
    /// The HTTP status of the answer that carried it (401 or 403).
    pub status: u16,
    /// `resource_metadata`: where the protected resource metadata is.
    pub resource_metadata: Option<String>,
    /// `scope`: the scopes the request needs, space-separated.
    pub scope: Option<String>,
    /// `error`, e.g. `invalid_token` or `insufficient_scope`.
    pub error: Option<String>,
}

impl Challenge {
    /// The Bearer challenge of an answer's headers (an empty one when there
    /// is none).
    pub fn from_headers(status: u16, headers: &HeaderMap) -> Self {
        let mut challenge = headers
            .get_all(WWW_AUTHENTICATE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .find_map(parse_bearer)
            .unwrap_or_default();
        challenge.status = status;
        challenge
    }

    /// A 403 asking for more scopes: a step-up.
    pub fn insufficient_scope(&self) -> bool {
        self.status == 403 && self.error.as_deref() == Some("insufficient_scope")
    }

    /// The challenged scopes, one by one.
    pub fn scopes(&self) -> Vec<String> {
        split_scopes(self.scope.as_deref().unwrap_or(""))
    }
}

/// Space-separated scopes, empty ones dropped.
pub(crate) fn split_scopes(scopes: &str) -> Vec<String> {
    scopes.split_whitespace().map(str::to_owned).collect()
}

/// The parameters of the `Bearer` challenge in one header value, which may
/// hold challenges of other schemes too.
fn parse_bearer(value: &str) -> Option<Challenge> {
    let mut rest = value.trim_start();
    // Find "Bearer" as a scheme: at the start or after a comma.
    loop {
        let (scheme, after) = split_token(rest);
        if scheme.eq_ignore_ascii_case("bearer") {
            rest = after;
            break;
        }
        // Skip to the next comma that is outside quotes.
        let next = skip_to_comma(after)?;
        rest = next.trim_start();
    }
    let mut challenge = Challenge::default();
    loop {
        rest = rest.trim_start_matches([' ', '\t', ',']);
        if rest.is_empty() {
            break;
        }
        let (name, after) = split_token(rest);
        let after = after.trim_start();
        let Some(after) = after.strip_prefix('=') else {
            // A new scheme begins: the Bearer challenge is over.
            break;
        };
        let (value, after) = parse_value(after.trim_start());
        rest = after;
        match name.to_ascii_lowercase().as_str() {
            "resource_metadata" => challenge.resource_metadata = Some(value),
            "scope" => challenge.scope = Some(value),
            "error" => challenge.error = Some(value),
            _ => {}
        }
    }
    Some(challenge)
}

/// A token (letters, digits and `!#$%&'*+-.^_`|~`) and what follows it.
fn split_token(s: &str) -> (&str, &str) {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c)))
        .unwrap_or(s.len());
    (&s[..end], s[end..].trim_start_matches([' ', '\t']))
}

/// A quoted string (with `\` escapes) or a token, and what follows it.
fn parse_value(s: &str) -> (String, &str) {
    let Some(quoted) = s.strip_prefix('"') else {
        let end = s.find([',', ' ', '\t']).unwrap_or(s.len());
        return (s[..end].to_owned(), &s[end..]);
    };
    let mut value = String::new();
    let mut chars = quoted.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => {
                if let Some((_, escaped)) = chars.next() {
                    value.push(escaped);
                }
            }
            '"' => return (value, &quoted[i + 1..]),
            c => value.push(c),
        }
    }
    (value, "")
}

/// What follows the next comma outside a quoted string.
fn skip_to_comma(s: &str) -> Option<&str> {
    let mut quoted = false;
    let mut escaped = false;
    for (i, c) in s.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            ',' if !quoted => return Some(&s[i + 1..]),
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_bearer_parameters() {
        let c = parse_bearer(
            r#"Bearer error="insufficient_scope", scope="files:read files:write", resource_metadata="https://a.example/.well-known/oauth-protected-resource/mcp""#,
        )
        .expect("a bearer challenge");
        assert_eq!(c.error.as_deref(), Some("insufficient_scope"));
        assert_eq!(c.scope.as_deref(), Some("files:read files:write"));
        assert_eq!(
            c.resource_metadata.as_deref(),
            Some("https://a.example/.well-known/oauth-protected-resource/mcp")
        );
    }

    #[test]
    fn finds_bearer_among_other_schemes() {
        let c = parse_bearer(r#"Basic realm="x, y", Bearer scope=read, error="invalid_token""#)
            .expect("a bearer challenge");
        assert_eq!(c.scope.as_deref(), Some("read"));
        assert_eq!(c.error.as_deref(), Some("invalid_token"));
        // A challenge of another scheme after Bearer ends it.
        let c = parse_bearer(r#"bearer scope="a", Basic realm="r""#).expect("bearer");
        assert_eq!(c.scope.as_deref(), Some("a"));
        assert!(parse_bearer(r#"Basic realm="r""#).is_none());
    }

    #[test]
    fn bare_bearer_and_escapes() {
        assert_eq!(parse_bearer("Bearer"), Some(Challenge::default()));
        let c = parse_bearer(r#"Bearer scope="a \"b\"""#).expect("bearer");
        assert_eq!(c.scope.as_deref(), Some(r#"a "b""#));
    }

    #[test]
    fn a_403_is_a_step_up_only_with_insufficient_scope() {
        let mut headers = HeaderMap::new();
        headers.insert(
            WWW_AUTHENTICATE,
            r#"Bearer error="insufficient_scope", scope="a b""#
                .parse()
                .expect("header"),
        );
        let c = Challenge::from_headers(403, &headers);
        assert!(c.insufficient_scope());
        assert_eq!(c.scopes(), ["a", "b"]);
        assert!(!Challenge::from_headers(403, &HeaderMap::new()).insufficient_scope());
        assert!(!Challenge::from_headers(401, &headers).insufficient_scope());
    }
}
