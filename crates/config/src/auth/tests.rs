use super::*;

const ASANA_URL: &str = "https://mcp.asana.com/authorize?response_type=code&client_id=Xy12\
    &code_challenge=E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM&code_challenge_method=S256\
    &redirect_uri=http%3A%2F%2Flocalhost%3A3334%2Foauth%2Fcallback&state=af0ifjsldkj\
    &resource=https%3A%2F%2Fmcp.asana.com%2Fsse";

/// Feeds every line and returns (line index, url) for each hit.
fn scan(lines: &[&str]) -> Vec<(usize, String)> {
    let mut detector = AuthDetector::new();
    lines
        .iter()
        .enumerate()
        .filter_map(|(i, line)| detector.feed(line).map(|url| (i, url)))
        .collect()
}

fn one_line(line: &str) -> Option<String> {
    AuthDetector::new().feed(line)
}

#[test]
fn mcp_remote_first_run() {
    // What `npx mcp-remote https://mcp.asana.com/sse` prints on stderr when
    // it has no token yet: its log() prefixes "[pid] " and the prompt
    // message starts and ends with "\n".
    let url_line = format!("{ASANA_URL}\n");
    let lines = [
        "[48213] Using automatically selected callback port: 3334",
        "[48213] [48213] Connecting to remote server: https://mcp.asana.com/sse",
        "[48213] Using transport strategy: http-first",
        "[48213] Received error: Error POSTing to endpoint (HTTP 401): Unauthorized",
        "[48213] Authentication required. Initializing auth...",
        "[48213] Discovering OAuth server configuration: https://mcp.asana.com/.well-known/oauth-authorization-server",
        "[48213] OAuth callback server running at http://127.0.0.1:3334",
        "[48213] ",
        "Please authorize this client by visiting:",
        &url_line,
        "",
        "[48213] Browser opened automatically.",
        "[48213] Auth code received, resolving promise",
        "[48213] Completing authorization...",
        "[48213] Connected to remote server using StreamableHTTPClientTransport",
        "[48213] Local STDIO server running",
        "[48213] Proxy established successfully between local STDIO and remote StreamableHTTPClientTransport",
        "[48213] Press Ctrl+C to exit",
    ];
    assert_eq!(scan(&lines), [(9, ASANA_URL.to_owned())]);
}

#[test]
fn mcp_remote_when_no_browser_can_open() {
    let lines = [
        "[7] ",
        "Please authorize this client by visiting:",
        "https://auth.example.com/oauth2/authorize?client_id=abc&state=x",
        "",
        "[7] Could not open browser automatically. Please copy and paste the URL above into your browser.",
    ];
    assert_eq!(
        scan(&lines),
        [(
            2,
            "https://auth.example.com/oauth2/authorize?client_id=abc&state=x".to_owned()
        )]
    );
}

#[test]
fn next_line_prompt_skips_blank_lines_and_accepts_loopback() {
    let lines = [
        "\u{1b}[33mOpen the following URL to authorize:\u{1b}[0m\r\n",
        "",
        "   ",
        "    http://localhost:8080/authorize?x=1\n",
    ];
    assert_eq!(
        scan(&lines),
        [(3, "http://localhost:8080/authorize?x=1".to_owned())]
    );
}

#[test]
fn next_line_prompt_is_dropped_by_unrelated_text() {
    let lines = [
        "Please authorize this client by visiting:",
        "Error: could not start callback server",
        "https://example.com/authorize",
    ];
    assert_eq!(scan(&lines), []);
}

#[test]
fn generic_one_line_prompts() {
    let cases = [
        (
            "Please visit this URL to authorize: https://a.example/auth?x=1.",
            "https://a.example/auth?x=1",
        ),
        (
            "(open the following link: https://x.example/login)",
            "https://x.example/login",
        ),
        (
            "Authorise the app at <https://id.example.org/device?code=ABCD>",
            "https://id.example.org/device?code=ABCD",
        ),
        (
            "OAuth required, go to HTTPS://Login.Example.com/o/oauth2/auth?c=1, then retry",
            "HTTPS://Login.Example.com/o/oauth2/auth?c=1",
        ),
        (
            "\u{1b}[1mAuthorization needed:\u{1b}[0m \u{1b}[4mhttps://auth.example.com/a?b=c\u{1b}[24m",
            "https://auth.example.com/a?b=c",
        ),
        (
            "Authorize here: https://en.wikipedia.org/wiki/Rust_(language).",
            "https://en.wikipedia.org/wiki/Rust_(language)",
        ),
        (
            "authorize via \u{1b}]8;;https://t.example/x\u{7}https://t.example/x\u{1b}]8;;\u{7} now",
            "https://t.example/x",
        ),
        (
            "OAuth: callback on http://127.0.0.1:3334/cb, please authorize at https://auth.example.com/x!",
            "https://auth.example.com/x",
        ),
    ];
    for (line, url) in cases {
        assert_eq!(one_line(line).as_deref(), Some(url), "{line:?}");
    }
}

#[test]
fn lines_without_a_prompt_do_not_match() {
    let lines = [
        // A URL with no hint.
        "Listening on https://api.example.com/mcp",
        "[48213] Connecting to remote server: https://mcp.asana.com/sse",
        // Hint words only inside the URL.
        "GET https://api.example.com/oauth/authorize 302 Found",
        "fetched https://example.com/visit/this-page",
        // A hint but only loopback or discovery URLs.
        "[1] OAuth callback server running at http://127.0.0.1:3334",
        "Authorization server metadata: https://a.example/.well-known/oauth-authorization-server",
        "redirecting to authorize at http://[::1]:9000/cb",
        // A hint and no URL, not ending in ':'.
        "Authorization complete.",
        // Look-alikes that are not URLs.
        "authorize: xhttps://nope.example and httpbin and https://",
        "visiting the following was fun https://blog.example.com",
        // "open the" without "following".
        "could not open the browser; see https://docs.example.com",
    ];
    for line in lines {
        assert_eq!(one_line(line), None, "{line:?}");
    }
}

#[test]
fn reset_forgets_a_pending_prompt() {
    let mut detector = AuthDetector::new();
    assert_eq!(
        detector.feed("Please authorize this client by visiting:"),
        None
    );
    detector.reset();
    assert_eq!(detector.feed("https://example.com/authorize"), None);
}

#[test]
fn strip_ansi_cases() {
    assert!(matches!(strip_ansi("plain"), Cow::Borrowed("plain")));
    assert_eq!(strip_ansi("\u{1b}[1;31mred\u{1b}[0m text"), "red text");
    assert_eq!(strip_ansi("a\u{1b}]0;title\u{1b}\\b"), "ab");
    assert_eq!(strip_ansi("a\u{1b}(Bb"), "ab");
    assert_eq!(strip_ansi("a\u{1b}=b"), "ab");
    assert_eq!(strip_ansi("cut\u{1b}["), "cut");
}
