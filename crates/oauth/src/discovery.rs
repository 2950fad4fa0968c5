//! Where the authorization server is and what it offers: protected
//! resource metadata (RFC 9728), then authorization server metadata (RFC
//! 8414 and OpenID Connect discovery), in the order the MCP specification
//! gives, with the checks it asks for.

use reqwest::{Client, StatusCode, Url};
use serde::Deserialize;

use crate::{AuthError, Challenge};

/// Most bytes of a metadata document.
const METADATA_BYTES: usize = 256 * 1024;

/// A protected resource metadata document, in the parts we use.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ResourceMetadata {
    /// The resource identifier; must be the server's.
    pub resource: Option<String>,
    /// Issuers of the authorization servers that issue tokens for it.
    #[serde(default)]
    pub authorization_servers: Vec<String>,
    /// Scopes the resource knows.
    pub scopes_supported: Option<Vec<String>>,
}

/// An authorization server's metadata, in the parts we use.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ServerMetadata {
    /// Its issuer identifier.
    #[serde(default)]
    pub issuer: String,
    /// Where the browser goes.
    pub authorization_endpoint: String,
    /// Where codes and refresh tokens are exchanged.
    pub token_endpoint: String,
    /// Dynamic client registration (RFC 7591), when offered.
    pub registration_endpoint: Option<String>,
    /// Scopes it knows.
    pub scopes_supported: Option<Vec<String>>,
    /// PKCE methods; S256 must be among them.
    pub code_challenge_methods_supported: Option<Vec<String>>,
    /// How a client may authenticate at the token endpoint.
    pub token_endpoint_auth_methods_supported: Option<Vec<String>>,
    /// Whether a URL may be a client id (a client ID metadata document).
    #[serde(default)]
    pub client_id_metadata_document_supported: bool,
    /// Whether the authorization response carries `iss` (RFC 9207).
    #[serde(default)]
    pub authorization_response_iss_parameter_supported: bool,
}

/// What discovery found for a server.
#[derive(Debug, Clone)]
pub struct Discovered {
    /// The value of the resource indicator: the metadata's `resource` as
    /// published, else the server's URL.
    pub resource: String,
    /// The authorization server's issuer, as the resource names it.
    pub issuer: String,
    /// Its metadata.
    pub metadata: ServerMetadata,
    /// The resource metadata's `scopes_supported`.
    pub resource_scopes: Option<Vec<String>>,
}

/// Finds the authorization server of `server`, whose answer carried
/// `challenge`.
pub async fn discover(
    http: &Client,
    server: &Url,
    challenge: &Challenge,
) -> Result<Discovered, AuthError> {
    let mut found = None;
    for url in resource_metadata_urls(server, challenge.resource_metadata.as_deref()) {
        if let Some(prm) = fetch::<ResourceMetadata>(http, &url).await? {
            found = Some(prm);
            break;
        }
    }
    let Some(prm) = found else {
        return legacy(http, server).await;
    };
    let resource = match &prm.resource {
        Some(resource) if !resource_matches(server, resource) => {
            return Err(AuthError::Discovery(format!(
                "the protected resource metadata names the resource {resource:?}, not this server; refusing to authorize for it"
            )));
        }
        Some(resource) => resource.clone(),
        None => canonical(server),
    };
    let issuer = prm.authorization_servers.first().cloned().ok_or_else(|| {
        AuthError::Discovery("the protected resource metadata names no authorization server".into())
    })?;
    let issuer_url = Url::parse(&issuer)
        .ok()
        .filter(|u| matches!(u.scheme(), "http" | "https") && u.has_host())
        .ok_or_else(|| AuthError::Discovery(format!("{issuer:?} is not an issuer URL")))?;
    let mut metadata = None;
    for url in server_metadata_urls(&issuer_url) {
        if let Some(found) = fetch::<ServerMetadata>(http, &url).await? {
            metadata = Some(found);
            break;
        }
    }
    let metadata = metadata.ok_or_else(|| {
        AuthError::Discovery(format!(
            "the authorization server {issuer} publishes no metadata (RFC 8414 or OpenID discovery)"
        ))
    })?;
    if metadata.issuer != issuer {
        return Err(AuthError::Discovery(format!(
            "the metadata of {issuer} names the issuer {:?}; refusing it",
            metadata.issuer
        )));
    }
    Ok(Discovered {
        resource,
        issuer,
        metadata,
        resource_scopes: prm.scopes_supported,
    })
}

/// A server without protected resource metadata (the 2025-03-26
/// revision): the authorization server is at the server's origin, with
/// RFC 8414 metadata or else the default endpoints.
async fn legacy(http: &Client, server: &Url) -> Result<Discovered, AuthError> {
    let origin = origin(server);
    let base = Url::parse(&origin).map_err(|e| AuthError::Discovery(e.to_string()))?;
    let url = base
        .join("/.well-known/oauth-authorization-server")
        .map_err(|e| AuthError::Discovery(e.to_string()))?;
    let metadata = match fetch::<ServerMetadata>(http, &url).await? {
        Some(metadata) => {
            if metadata.issuer != origin && metadata.issuer.trim_end_matches('/') != origin {
                return Err(AuthError::Discovery(format!(
                    "the metadata at {origin} names the issuer {:?}; refusing it",
                    metadata.issuer
                )));
            }
            metadata
        }
        None => ServerMetadata {
            issuer: origin.clone(),
            authorization_endpoint: format!("{origin}/authorize"),
            token_endpoint: format!("{origin}/token"),
            registration_endpoint: Some(format!("{origin}/register")),
            // The 2025-03-26 revision requires PKCE of every server.
            code_challenge_methods_supported: Some(vec!["S256".into()]),
            ..ServerMetadata::default()
        },
    };
    Ok(Discovered {
        resource: canonical(server),
        issuer: origin,
        metadata,
        resource_scopes: None,
    })
}

/// Where to look for the protected resource metadata, in order: the
/// challenge's `resource_metadata`, the path-based well-known URL, the
/// root one.
pub fn resource_metadata_urls(server: &Url, hint: Option<&str>) -> Vec<Url> {
    let mut urls = Vec::new();
    if let Some(hint) = hint.and_then(|h| Url::parse(h).ok()) {
        if matches!(hint.scheme(), "http" | "https") {
            urls.push(hint);
        }
    }
    let path = server.path().trim_end_matches('/');
    let origin = origin(server);
    if !path.is_empty() {
        if let Ok(url) = Url::parse(&format!(
            "{origin}/.well-known/oauth-protected-resource{path}"
        )) {
            urls.push(url);
        }
    }
    if let Ok(url) = Url::parse(&format!("{origin}/.well-known/oauth-protected-resource")) {
        urls.push(url);
    }
    urls.dedup();
    urls
}

/// Where to look for an authorization server's metadata, in the order of
/// the specification: with a path, RFC 8414's and OpenID's path-inserted
/// forms, then OpenID's appended form; without one, the two at the root.
pub fn server_metadata_urls(issuer: &Url) -> Vec<Url> {
    let origin = origin(issuer);
    let path = issuer.path().trim_end_matches('/');
    let candidates = if path.is_empty() {
        vec![
            format!("{origin}/.well-known/oauth-authorization-server"),
            format!("{origin}/.well-known/openid-configuration"),
        ]
    } else {
        vec![
            format!("{origin}/.well-known/oauth-authorization-server{path}"),
            format!("{origin}/.well-known/openid-configuration{path}"),
            format!("{origin}{path}/.well-known/openid-configuration"),
        ]
    };
    candidates
        .iter()
        .filter_map(|c| Url::parse(c).ok())
        .collect()
}

/// Whether a protected resource metadata's `resource` names `server`: the
/// same origin, and a path that is the server's or one of its parents.
pub fn resource_matches(server: &Url, resource: &str) -> bool {
    let Ok(resource) = Url::parse(resource) else {
        return false;
    };
    if resource.origin() != server.origin() || resource.fragment().is_some() {
        return false;
    }
    let want = resource.path().trim_end_matches('/');
    let have = server.path().trim_end_matches('/');
    have == want || have.starts_with(&format!("{want}/"))
}

/// The server's URL as a resource identifier: without a fragment.
pub fn canonical(server: &Url) -> String {
    let mut url = server.clone();
    url.set_fragment(None);
    let text = url.to_string();
    // A URL parser adds "/" to a URL without a path; the identifier has none.
    if server.path() == "/" && !text.ends_with("//") {
        if let Some(stripped) = text.strip_suffix('/') {
            return stripped.to_owned();
        }
    }
    text
}

/// `scheme://host[:port]`.
fn origin(url: &Url) -> String {
    url.origin().ascii_serialization()
}

/// GETs a JSON metadata document: `None` when there is none there (a 4xx),
/// an error when the server fails or sends something that is not one.
async fn fetch<T: serde::de::DeserializeOwned>(
    http: &Client,
    url: &Url,
) -> Result<Option<T>, AuthError> {
    let response = http
        .get(url.clone())
        .header(reqwest::header::ACCEPT, "application/json")
        .send()
        .await
        .map_err(|e| AuthError::Discovery(format!("{}: {}", redact(url), describe(&e))))?;
    let status = response.status();
    if status.is_client_error() || status.is_redirection() {
        tracing::debug!(status = status.as_u16(), url = %redact(url), "no metadata here");
        return Ok(None);
    }
    if status != StatusCode::OK {
        return Err(AuthError::Discovery(format!(
            "{}: HTTP {}",
            redact(url),
            status.as_u16()
        )));
    }
    let body = read_bounded(response, METADATA_BYTES)
        .await
        .map_err(|e| AuthError::Discovery(format!("{}: {e}", redact(url))))?;
    match serde_json::from_slice(&body) {
        Ok(doc) => Ok(Some(doc)),
        Err(e) => {
            tracing::debug!(url = %redact(url), error = %e, "not a metadata document");
            Ok(None)
        }
    }
}

/// A body, up to `max` bytes.
pub(crate) async fn read_bounded(
    mut response: reqwest::Response,
    max: usize,
) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| describe(&e))? {
        if body.len() + chunk.len() > max {
            return Err(format!("the document is over {max} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// A URL without its query (it may carry a key).
pub(crate) fn redact(url: &Url) -> String {
    let mut url = url.clone();
    url.set_query(None);
    url.set_fragment(None);
    url.to_string()
}

/// A request's failure in words, without the URL.
pub(crate) fn describe(err: &reqwest::Error) -> String {
    use std::error::Error as _;
    let mut last = err.without_url_ref().to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        last = cause.to_string();
        source = cause.source();
    }
    last
}

trait WithoutUrl {
    fn without_url_ref(&self) -> String;
}

impl WithoutUrl for reqwest::Error {
    fn without_url_ref(&self) -> String {
        if self.is_timeout() {
            "timed out".into()
        } else if self.is_connect() {
            "cannot connect".into()
        } else {
            "the request failed".into()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> Url {
        Url::parse(s).expect("url")
    }

    fn strings(urls: Vec<Url>) -> Vec<String> {
        urls.into_iter().map(String::from).collect()
    }

    #[test]
    fn resource_metadata_in_the_specification_order() {
        let server = url("https://mcp.example.com/public/mcp");
        assert_eq!(
            strings(resource_metadata_urls(
                &server,
                Some("https://mcp.example.com/custom.json")
            )),
            [
                "https://mcp.example.com/custom.json",
                "https://mcp.example.com/.well-known/oauth-protected-resource/public/mcp",
                "https://mcp.example.com/.well-known/oauth-protected-resource",
            ]
        );
        assert_eq!(
            strings(resource_metadata_urls(&url("http://127.0.0.1:9/"), None)),
            ["http://127.0.0.1:9/.well-known/oauth-protected-resource"]
        );
    }

    #[test]
    fn server_metadata_in_the_specification_order() {
        assert_eq!(
            strings(server_metadata_urls(&url(
                "https://auth.example.com/tenant1"
            ))),
            [
                "https://auth.example.com/.well-known/oauth-authorization-server/tenant1",
                "https://auth.example.com/.well-known/openid-configuration/tenant1",
                "https://auth.example.com/tenant1/.well-known/openid-configuration",
            ]
        );
        assert_eq!(
            strings(server_metadata_urls(&url("https://auth.example.com"))),
            [
                "https://auth.example.com/.well-known/oauth-authorization-server",
                "https://auth.example.com/.well-known/openid-configuration",
            ]
        );
    }

    #[test]
    fn the_resource_must_be_the_server() {
        let server = url("https://mcp.example.com/v1/mcp");
        assert!(resource_matches(&server, "https://mcp.example.com/v1/mcp"));
        assert!(resource_matches(&server, "https://mcp.example.com/v1/mcp/"));
        assert!(resource_matches(&server, "https://mcp.example.com"));
        assert!(resource_matches(&server, "https://MCP.example.com:443/v1"));
        assert!(!resource_matches(
            &server,
            "https://evil.example.com/v1/mcp"
        ));
        assert!(!resource_matches(&server, "http://mcp.example.com/v1/mcp"));
        assert!(!resource_matches(&server, "https://mcp.example.com/v1/mc"));
        assert!(!resource_matches(&server, "https://mcp.example.com/other"));
        assert!(!resource_matches(&server, "not a url"));
    }

    #[test]
    fn canonical_has_no_fragment_and_no_added_slash() {
        assert_eq!(
            canonical(&url("https://a.example/mcp#x")),
            "https://a.example/mcp"
        );
        assert_eq!(canonical(&url("https://a.example")), "https://a.example");
        assert_eq!(
            canonical(&url("https://a.example/mcp/")),
            "https://a.example/mcp/"
        );
    }
}
