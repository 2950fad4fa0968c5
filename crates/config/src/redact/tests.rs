use std::io::Write as _;

use super::*;

fn redactor(pairs: &[(&str, &str)]) -> Redactor {
    let redactor = Redactor::new();
    redactor.learn("test", pairs.iter().copied());
    redactor
}

#[test]
fn replaces_values_with_their_names() {
    let r = redactor(&[("API_KEY", "sk-live-123456")]);
    assert_eq!(
        r.redact("key is sk-live-123456, again sk-live-123456."),
        "key is [redacted:API_KEY], again [redacted:API_KEY]."
    );
    assert!(matches!(r.redact("nothing here"), Cow::Borrowed(_)));
}

#[test]
fn short_values_are_not_redacted() {
    let r = redactor(&[("PORT", "8080"), ("FLAG", "true"), ("FIVE", "abcde")]);
    assert!(r.is_empty());
    assert_eq!(r.redact("true 8080 abcde"), "true 8080 abcde");
    let r = redactor(&[("SIX", "abcdef")]);
    assert_eq!(r.redact("abcdefg"), "[redacted:SIX]g");
}

#[test]
fn longest_value_wins_where_one_is_a_prefix_of_another() {
    let r = redactor(&[("SHORT", "abc123"), ("LONG", "abc123456789")]);
    assert_eq!(r.redact("x abc123456789 y"), "x [redacted:LONG] y");
    assert_eq!(r.redact("x abc123-456 y"), "x [redacted:SHORT]-456 y");
    // The same, learned in the other order.
    let r = redactor(&[("LONG", "abc123456789"), ("SHORT", "abc123")]);
    assert_eq!(
        r.redact("abc123456789abc123"),
        "[redacted:LONG][redacted:SHORT]"
    );
}

#[test]
fn overlapping_values_leave_no_part_of_either() {
    let r = redactor(&[("A", "left-secret-XYZ"), ("B", "XYZ-right-secret")]);
    let out = r.redact("[left-secret-XYZ-right-secret]");
    assert_eq!(out, "[[redacted:A][redacted:B]]");
    // A value inside another is covered by the outer one.
    let r = redactor(&[("OUTER", "aaaa-inner-value-bbbb"), ("INNER", "inner-value")]);
    assert_eq!(r.redact("aaaa-inner-value-bbbb"), "[redacted:OUTER]");
    assert_eq!(r.redact("inner-value"), "[redacted:INNER]");
}

#[test]
fn json_escaped_forms_are_found() {
    let value = "p\"a\\ss/wörd\tx";
    let r = redactor(&[("DB_PASSWORD", value)]);
    // As serde_json writes it.
    let json = serde_json::to_string(&serde_json::json!({ "msg": format!("pw={value}") }))
        .unwrap_or_default();
    assert!(json.contains("p\\\"a\\\\ss/wörd\\tx"), "{json}");
    let out = r.redact(&json);
    assert_eq!(out, r#"{"msg":"pw=[redacted:DB_PASSWORD]"}"#);
    // As Python's json.dumps writes it (non-ASCII as \u, / as is).
    assert_eq!(
        r.redact(r#""p\"a\\ss/w\u00f6rd\tx""#),
        r#""[redacted:DB_PASSWORD]""#
    );
    // With an escaped slash.
    assert_eq!(r.redact(r#"p\"a\\ss\/wörd\tx"#), "[redacted:DB_PASSWORD]");
    // Escaped twice: JSON quoted in a JSON string.
    let twice = serde_json::to_string(&json).unwrap_or_default();
    let out = r.redact(&twice);
    assert!(!out.contains("ss/w"), "{out}");
    assert!(out.contains("[redacted:DB_PASSWORD]"), "{out}");
}

#[test]
fn lines_of_a_multi_line_value_are_found_one_by_one() {
    let pem = "-----BEGIN KEY-----\nMIIEvQIBADANBgkqhkiG9w0B\n-----END KEY-----";
    let r = redactor(&[("PRIVATE_KEY", pem)]);
    assert_eq!(
        r.redact("line: MIIEvQIBADANBgkqhkiG9w0B"),
        "line: [redacted:PRIVATE_KEY]"
    );
    assert_eq!(r.redact(pem), "[redacted:PRIVATE_KEY]");
}

#[test]
fn a_source_read_again_replaces_its_values() {
    let r = Redactor::new();
    r.learn("env_file:a", [("TOKEN", "first-token-1")]);
    r.learn("env_file:b", [("OTHER", "other-token-2")]);
    assert_eq!(r.redact("first-token-1"), "[redacted:TOKEN]");
    r.learn("env_file:a", [("TOKEN", "rotated-token-3")]);
    assert_eq!(r.redact("first-token-1"), "first-token-1");
    assert_eq!(
        r.redact("rotated-token-3 other-token-2"),
        "[redacted:TOKEN] [redacted:OTHER]"
    );
    r.forget("env_file:b");
    assert_eq!(r.redact("other-token-2"), "other-token-2");
}

#[test]
fn bytes_that_are_not_utf8_are_redacted_around() {
    let r = redactor(&[("TOKEN", "tok-123456")]);
    let out = r.redact_bytes(b"\xff\xfe tok-123456 \xff");
    assert_eq!(&*out, b"\xff\xfe [redacted:TOKEN] \xff");
}

#[test]
fn json_values_are_redacted_in_place() {
    let r = redactor(&[("TOKEN", "tok-123456")]);
    let mut value = serde_json::json!({
        "reason": "bad tok-123456",
        "stderr": ["a", "tok-123456"],
        "tok-123456": 1,
        "n": 3,
    });
    r.redact_json(&mut value);
    assert_eq!(
        value,
        serde_json::json!({
            "reason": "bad [redacted:TOKEN]",
            "stderr": ["a", "[redacted:TOKEN]"],
            "[redacted:TOKEN]": 1,
            "n": 3,
        })
    );
}

#[test]
fn the_writer_finds_values_split_across_writes() -> io::Result<()> {
    let r = redactor(&[("TOKEN", "tok-123456")]);
    let mut out = Vec::new();
    {
        let mut w = Writer::new(&mut out, &r);
        w.write_all(b"first tok-1")?;
        w.write_all(b"23456 end\nsecond to")?;
        w.write_all(b"k-123")?;
        w.write_all(b"456")?;
    }
    assert_eq!(
        String::from_utf8_lossy(&out),
        "first [redacted:TOKEN] end\nsecond [redacted:TOKEN]"
    );
    Ok(())
}

#[test]
fn the_writer_bounds_a_line_without_an_end() -> io::Result<()> {
    let r = redactor(&[("TOKEN", "tok-123456")]);
    let mut out = Vec::new();
    let mut w = Writer::new(&mut out, &r);
    w.write_all(&vec![b'x'; WRITER_MAX_PENDING * 2 + 10])?;
    assert!(w.pending.len() <= WRITER_MAX_PENDING);
    drop(w);
    assert_eq!(out.len(), WRITER_MAX_PENDING * 2 + 10);
    Ok(())
}

#[test]
fn secret_names() {
    for name in [
        "GITHUB_TOKEN",
        "api_key",
        "OPENAI_API_KEY",
        "DB_PASSWORD",
        "DB_PASS",
        "MYSQL_PWD",
        "Authorization",
        "X-Api-Key",
        "CLIENT_SECRET",
        "AWS_SESSION_TOKEN",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "SSH_PRIVATE_KEY",
        "Cookie",
        "SENTRY_DSN",
    ] {
        assert!(is_secret_name(name), "{name}");
    }
    for name in [
        "PATH",
        "HOME",
        "PWD",
        "NOTES_DIR",
        "LOG_LEVEL",
        "PORT",
        "X-Team",
    ] {
        assert!(!is_secret_name(name), "{name}");
    }
}
