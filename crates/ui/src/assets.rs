//! The page's files, embedded in the binary when it is built (no build
//! step of their own, nothing fetched at run time).

use include_dir::{Dir, include_dir};

static ASSETS: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/assets");

/// The meta tag's placeholder in `index.html`, replaced by the CSRF token;
/// without it, the tag is inserted after `<head>`.
const CSRF_PLACEHOLDER: &str = "__MCPVISOR_CSRF__";

/// A file under `assets/` and its media type; `None` for anything else
/// (no directory listing, no `..`).
pub fn get(path: &str) -> Option<(&'static [u8], &'static str)> {
    if path
        .split('/')
        .any(|part| part.is_empty() || part.starts_with('.'))
    {
        return None;
    }
    let file = ASSETS.get_file(path)?;
    Some((file.contents(), media_type(path)))
}

/// `index.html` with the page's CSRF token in it.
pub fn index(csrf: &str) -> String {
    let html = ASSETS
        .get_file("index.html")
        .and_then(|f| f.contents_utf8())
        .unwrap_or("<!doctype html><html><head></head><body></body></html>");
    if html.contains(CSRF_PLACEHOLDER) {
        return html.replace(CSRF_PLACEHOLDER, csrf);
    }
    let meta = format!("<meta name=\"csrf-token\" content=\"{csrf}\">");
    match html.find("<head>") {
        Some(at) => {
            let at = at + "<head>".len();
            format!("{}\n{meta}{}", &html[..at], &html[at..])
        }
        None => format!("{meta}\n{html}"),
    }
}

fn media_type(path: &str) -> &'static str {
    match path.rsplit_once('.').map(|(_, ext)| ext) {
        Some("html") => "text/html; charset=utf-8",
        Some("js" | "mjs") => "text/javascript; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("svg") => "image/svg+xml",
        Some("png") => "image/png",
        Some("ico") => "image/x-icon",
        Some("json") => "application/json",
        Some("woff2") => "font/woff2",
        Some("txt") => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_files_are_there() {
        for name in ["index.html", "app.js", "app.css", "favicon.svg"] {
            assert!(get(name).is_some(), "{name} is embedded");
        }
        assert_eq!(
            get("app.js").map(|f| f.1),
            Some("text/javascript; charset=utf-8")
        );
        assert!(get("../Cargo.toml").is_none());
        assert!(get("nope.js").is_none());
        assert!(get("").is_none());
    }

    #[test]
    fn the_csrf_token_is_in_the_html() {
        let html = index("0123abcd");
        assert!(html.contains("<meta name=\"csrf-token\" content=\"0123abcd\">"));
        assert!(!html.contains(CSRF_PLACEHOLDER));
    }
}
