use serde_json::json;

use super::*;

#[test]
fn tail_keeps_the_last_fifty_lines() {
    let mut tail = StderrTail::new();
    assert!(tail.is_empty());
    assert_eq!(tail.text(), "");
    for i in 0..120 {
        tail.push_line(&format!("line {i}\n"));
    }
    assert_eq!(tail.len(), TAIL_MAX_LINES);
    assert_eq!(tail.lines().next(), Some("line 70"));
    assert_eq!(tail.lines().last(), Some("line 119"));
    assert!(tail.text().starts_with("line 70\nline 71\n"));
    assert!(tail.text().ends_with("line 119"));
}

#[test]
fn tail_keeps_at_most_eight_kib() {
    let mut tail = StderrTail::new();
    let line = "x".repeat(1000);
    for _ in 0..20 {
        tail.push_line(&line);
    }
    // Eight lines of 1000 bytes plus seven newlines fit; nine would not.
    assert_eq!(tail.len(), 8);
    assert_eq!(tail.text().len(), 8 * 1000 + 7);
    assert!(tail.text().len() <= TAIL_MAX_BYTES);

    // Exactly at the limit is kept.
    let mut tail = StderrTail::new();
    tail.push_line("a");
    tail.push_line(&"b".repeat(TAIL_MAX_BYTES - 2));
    assert_eq!(tail.len(), 2);
    assert_eq!(tail.text().len(), TAIL_MAX_BYTES);
    tail.push_line("");
    assert_eq!(tail.len(), 2, "the oldest line made room");
}

#[test]
fn long_lines_are_cut_on_a_character_boundary() {
    let mut tail = StderrTail::new();
    tail.push_line("before");
    tail.push_line(&"é".repeat(TAIL_MAX_BYTES));
    assert_eq!(tail.len(), 1, "a full-size line leaves no room for another");
    let text = tail.text();
    assert!(text.len() <= TAIL_MAX_BYTES, "{}", text.len());
    assert!(text.len() > TAIL_MAX_BYTES - 8);
    assert!(text.ends_with("é…"));
}

#[test]
fn tail_strips_line_endings_and_colours() {
    let mut tail = StderrTail::new();
    tail.push_line("\u{1b}[31mError:\u{1b}[0m boom\r\n");
    tail.push_line("  at main.js:1\n");
    assert_eq!(tail.text(), "Error: boom\n  at main.js:1");
    tail.clear();
    assert!(tail.is_empty());
    assert_eq!(tail.text(), "");
}

fn report(exit: Option<ExitKind>, uptime: Duration, tail: &str, reason: &str) -> CrashReport {
    CrashReport {
        phase: CrashPhase::Initialize,
        exit,
        uptime,
        stderr_tail: tail.to_owned(),
        reason: reason.to_owned(),
        stray_stdout: StrayStdout::default(),
    }
}

#[test]
fn a_remote_servers_report_names_the_http_status_and_what_it_said() {
    let end = |status, detail: &str| {
        Some(ExitKind::Http(HttpEnd {
            status,
            stage: HttpStage::Post,
            detail: detail.to_owned(),
        }))
    };
    let crash = report(
        end(Some(401), "not authorized"),
        Duration::from_millis(10),
        r#"POST: HTTP 401: {"error":"a valid bearer token is required"}"#,
        "the remote server answered HTTP 401 to a POST: not authorized",
    );
    assert_eq!(
        crash.to_string(),
        "server answered HTTP 401 to a POST: not authorized during initialize after 10ms\n  \
         HTTP errors (last 1 line):\n    \
         POST: HTTP 401: {\"error\":\"a valid bearer token is required\"}"
    );
    let crash = report(
        end(None, "cannot connect: Connection refused"),
        Duration::ZERO,
        "",
        "",
    );
    assert_eq!(
        crash.to_string(),
        "server gave no answer to a POST: cannot connect: Connection refused during initialize after 0ms"
    );
}

#[test]
fn display_is_a_summary_then_the_indented_tail() {
    let crash = report(
        Some(ExitKind::Code(3)),
        Duration::from_millis(1234),
        "Error: GITHUB_PERSONAL_ACCESS_TOKEN is not set\n    at main (index.js:12:9)",
        "",
    );
    assert_eq!(
        crash.to_string(),
        "server exited with code 3 during initialize after 1.2s\n  \
         stderr (last 2 lines):\n    \
         Error: GITHUB_PERSONAL_ACCESS_TOKEN is not set\n    \
         \x20   at main (index.js:12:9)"
    );

    let crash = CrashReport {
        phase: CrashPhase::Serving,
        ..report(
            Some(ExitKind::signal(9)),
            Duration::from_secs(185),
            "",
            "stdout closed",
        )
    };
    assert_eq!(
        crash.to_string(),
        "server was killed by SIGKILL (signal 9) during serving after 3m05s: stdout closed\n  \
         stderr: (empty)"
    );

    let crash = CrashReport {
        phase: CrashPhase::Spawn,
        ..report(
            None,
            Duration::from_micros(300),
            "one line\n",
            "cannot run \"npx\": No such file or directory",
        )
    };
    assert_eq!(
        crash.to_string(),
        "server failed during spawn after 0ms: cannot run \"npx\": No such file or directory\n  \
         stderr (last 1 line):\n    one line"
    );
    assert_eq!(
        crash.summary(),
        "server failed during spawn after 0ms: cannot run \"npx\": No such file or directory"
    );
}

#[test]
fn exit_kinds_read_well() {
    assert_eq!(ExitKind::Code(0).to_string(), "exited with code 0");
    assert_eq!(
        ExitKind::signal(15).to_string(),
        "was killed by SIGTERM (signal 15)"
    );
    assert_eq!(ExitKind::signal(64).to_string(), "was killed by signal 64");
    assert_eq!(
        ExitKind::Unknown.to_string(),
        "exited with an unknown status"
    );
}

#[test]
fn uptime_formats() {
    assert_eq!(format_uptime(Duration::ZERO), "0ms");
    assert_eq!(format_uptime(Duration::from_millis(999)), "999ms");
    assert_eq!(format_uptime(Duration::from_millis(1000)), "1.0s");
    assert_eq!(format_uptime(Duration::from_millis(59_960)), "59.9s");
    assert_eq!(format_uptime(Duration::from_secs(60)), "1m00s");
    assert_eq!(format_uptime(Duration::from_secs(3599)), "59m59s");
    assert_eq!(format_uptime(Duration::from_secs(7620)), "2h07m");
}

#[test]
fn json_shape() -> Result<(), serde_json::Error> {
    let crash = report(
        Some(ExitKind::Code(3)),
        Duration::from_millis(1234),
        "boom",
        "initialize failed",
    );
    assert_eq!(
        serde_json::to_value(&crash)?,
        json!({
            "phase": "initialize",
            "exit": {"kind": "code", "code": 3},
            "uptime_ms": 1234,
            "stderr_tail": "boom",
            "reason": "initialize failed",
        })
    );
    let crash = CrashReport {
        phase: CrashPhase::Spawn,
        ..report(None, Duration::ZERO, "", "")
    };
    assert_eq!(serde_json::to_value(&crash)?["exit"], json!(null));
    assert_eq!(serde_json::to_value(&crash)?["phase"], json!("spawn"));
    assert_eq!(
        serde_json::to_value(ExitKind::signal(9))?,
        json!({"kind": "signal", "signal": 9, "name": "SIGKILL"})
    );
    assert_eq!(
        serde_json::to_value(ExitKind::signal(64))?,
        json!({"kind": "signal", "signal": 64})
    );
    assert_eq!(
        serde_json::to_value(ExitKind::Unknown)?,
        json!({"kind": "unknown"})
    );
    assert_eq!(serde_json::to_value(CrashPhase::Serving)?, json!("serving"));
    Ok(())
}

#[cfg(unix)]
#[test]
fn exit_kind_from_a_real_status() -> std::io::Result<()> {
    use std::process::Command;
    let status = Command::new("sh").args(["-c", "exit 7"]).status()?;
    assert_eq!(ExitKind::from(status), ExitKind::Code(7));
    let status = Command::new("sh").args(["-c", "kill -9 $$"]).status()?;
    assert_eq!(ExitKind::from(status), ExitKind::signal(9));
    Ok(())
}

#[test]
fn error_data_keeps_its_wire_shape_both_ways() -> Result<(), serde_json::Error> {
    let lost = ErrorData {
        generation: Some(2),
        reason: "it exited with exit code 3".into(),
        phase: Some(CrashPhase::Serving),
        exit: Some(ExitKind::Code(3)),
        uptime_ms: Some(1234),
        stderr: Some(vec!["boom".into()]),
        stray_stdout: StrayStdout::default(),
    };
    let wire = json!({
        "generation": 2,
        "reason": "it exited with exit code 3",
        "phase": "serving",
        "exit": {"code": 3},
        "uptime_ms": 1234,
        "stderr": ["boom"],
    });
    assert_eq!(serde_json::to_value(&lost)?, wire);
    assert_eq!(serde_json::from_value::<ErrorData>(wire)?, lost);
    // A signal, and a status not known: `null`, not absent.
    let killed = json!({"reason": "r", "phase": "serving", "exit": {"signal": 9}});
    assert_eq!(
        serde_json::from_value::<ErrorData>(killed.clone())?.exit,
        Some(ExitKind::signal(9))
    );
    let unknown = ErrorData {
        exit: Some(ExitKind::Unknown),
        ..ErrorData::reason("r")
    };
    assert_eq!(serde_json::to_value(&unknown)?["exit"], json!(null));
    assert_eq!(
        serde_json::from_value::<ErrorData>(serde_json::to_value(&unknown)?)?,
        unknown
    );
    // A remote server's end: its HTTP status (null when nothing answered)
    // and what was being done.
    let gone = ErrorData {
        exit: Some(ExitKind::Http(HttpEnd {
            status: Some(404),
            stage: HttpStage::Post,
            detail: "the session ended".into(),
        })),
        ..ErrorData::reason("r")
    };
    let wire = json!({"http": {"status": 404, "stage": "post", "detail": "the session ended"}});
    assert_eq!(serde_json::to_value(&gone)?["exit"], wire);
    assert_eq!(
        serde_json::from_value::<ErrorData>(serde_json::to_value(&gone)?)?,
        gone
    );
    let unreachable = json!({"reason": "r", "exit": {"http": {"status": null, "stage": "listen"}}});
    assert_eq!(
        serde_json::from_value::<ErrorData>(unreachable)?.exit,
        Some(ExitKind::Http(HttpEnd {
            status: None,
            stage: HttpStage::Listen,
            detail: String::new(),
        }))
    );
    // Spawn failures and plain refusals carry no exit at all.
    assert_eq!(
        serde_json::to_value(ErrorData::spawn("no such file", Some(4)))?,
        json!({"generation": 4, "reason": "no such file", "phase": "spawn"})
    );
    assert_eq!(
        serde_json::to_value(ErrorData::reason("duplicate id"))?,
        json!({"reason": "duplicate id"})
    );
    Ok(())
}

#[test]
fn error_data_becomes_a_crash_report_only_with_a_phase() {
    assert_eq!(ErrorData::reason("duplicate id").crash_report(), None);
    let spawn = ErrorData::spawn("no such file", None)
        .crash_report()
        .expect("report");
    assert_eq!((spawn.phase, spawn.exit), (CrashPhase::Spawn, None));
    let lost = ErrorData {
        phase: Some(CrashPhase::Initialize),
        uptime_ms: Some(1500),
        stderr: Some(vec!["a".into(), "b".into()]),
        ..ErrorData::reason("it closed its stdout")
    }
    .crash_report()
    .expect("report");
    assert_eq!(lost.exit, Some(ExitKind::Unknown));
    assert_eq!(lost.uptime, Duration::from_millis(1500));
    assert_eq!(lost.stderr_tail, "a\nb");
}

#[test]
fn stray_stdout_is_counted_and_its_content_kept_only_when_asked() {
    let mut hidden = StrayStdout::default();
    hidden.record(b"not json", false);
    hidden.record(b"Loading model...\r", false);
    assert_eq!((hidden.lines, hidden.bytes), (2, 25));
    assert!(hidden.heads.is_empty());
    let crash = CrashReport {
        stray_stdout: hidden,
        ..report(Some(ExitKind::Code(3)), Duration::ZERO, "", "")
    };
    let text = crash.to_string();
    assert!(
        text.ends_with("\n  stdout: 2 lines that are not JSON-RPC (25 bytes)"),
        "{text}"
    );
    assert!(!text.contains("not json"), "{text}");
    assert_eq!(
        serde_json::to_value(&crash).expect("json")["stray_stdout"],
        json!({"lines": 2, "bytes": 25})
    );

    let mut shown = StrayStdout::default();
    let long = "x".repeat(1000);
    for line in ["\x1b[1mnot json\x1b[0m", &long, "third", "fourth"] {
        shown.record(line.as_bytes(), true);
    }
    assert_eq!(shown.lines, 4);
    assert_eq!(shown.heads.len(), StrayStdout::MAX_HEADS);
    assert_eq!(shown.heads[0], "not json");
    assert!(shown.heads[1].len() <= StrayStdout::HEAD_BYTES);
    let crash = CrashReport {
        stray_stdout: shown,
        ..report(Some(ExitKind::Code(3)), Duration::ZERO, "", "")
    };
    assert!(
        crash
            .to_string()
            .contains("(1027 bytes), starting:\n    not json\n"),
        "{crash}"
    );
    // A report without stray output looks as it always did.
    let plain = report(Some(ExitKind::Code(3)), Duration::ZERO, "", "");
    assert!(!plain.to_string().contains("stdout"));
    assert!(
        serde_json::to_value(&plain)
            .expect("json")
            .get("stray_stdout")
            .is_none()
    );
}
