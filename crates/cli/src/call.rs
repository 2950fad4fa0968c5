//! `mcpvisor call`: one tool call from the shell.

use std::process::ExitCode;

use serde_json::{Value, json};

use crate::cli::CallArgs;
use crate::output;
use crate::probe::{self, Failed, Probe};

pub fn main(args: CallArgs) -> ExitCode {
    let with_config = args.server.config.is_some();
    let mut words = args.words.clone();
    let name = if with_config && !words.is_empty() {
        Some(words.remove(0))
    } else {
        None
    };
    let (tool, raw_args) = match words.as_slice() {
        [tool] => (tool.clone(), "{}".to_owned()),
        [tool, raw] => (tool.clone(), raw.clone()),
        _ => {
            let usage = if with_config {
                "--config FILE NAME TOOL [ARGS_JSON]"
            } else {
                "TOOL [ARGS_JSON] -- CMD..."
            };
            eprintln!("mcpvisor: usage: mcpvisor call {usage}");
            return ExitCode::from(2);
        }
    };
    let arguments: Value = match serde_json::from_str(&raw_args) {
        Ok(v @ Value::Object(_)) => v,
        Ok(_) => {
            eprintln!("mcpvisor: ARGS_JSON must be a JSON object, like '{{\"path\": \"/tmp\"}}'");
            return ExitCode::from(2);
        }
        Err(e) => {
            eprintln!("mcpvisor: ARGS_JSON is not valid JSON: {e}");
            return ExitCode::from(2);
        }
    };
    let json_out = args.server.json;
    let limit = args.server.timeout;
    let code = probe::run(
        &args.server,
        name.as_deref(),
        &args.command,
        move |mut probe| async move {
            let result = call(&mut probe, &tool, arguments, limit, json_out).await;
            (probe, result)
        },
    );
    ExitCode::from(code)
}

async fn call(
    p: &mut Probe,
    tool: &str,
    arguments: Value,
    limit: std::time::Duration,
    json_out: bool,
) -> Result<u8, Failed> {
    if !p.chosen.spec.def.tools.permits(tool) {
        return Err(Failed::msg(format!(
            "tool `{tool}` is not allowed by the config's tools filter"
        )));
    }
    let params =
        json!({"name": tool, "arguments": arguments, "_meta": {"progressToken": "mcpvisor-call"}});
    let mut notes = p.conn.take_notifications();
    let request = p.conn.request("tools/call", params, limit);
    tokio::pin!(request);
    let result = loop {
        tokio::select! {
            result = &mut request => break result?,
            Some(note) = async { notes.as_mut()?.recv().await } => show_progress(&note),
        }
    };
    // Notifications read before the answer are still queued: show them too.
    while let Some(note) = notes.as_mut().and_then(|n| n.try_recv().ok()) {
        show_progress(&note);
    }
    let text = if json_out {
        let mut json = serde_json::to_string_pretty(&result).unwrap_or_default();
        json.push('\n');
        json
    } else {
        render(&result)
    };
    if let Err(e) = output::print(&text) {
        return Ok(e.report());
    }
    Ok(if result["isError"] == true { 1 } else { 0 })
}

fn show_progress(note: &mcpvisor_runner::Notification) {
    if note.method != "notifications/progress" {
        return;
    }
    let p = &note.params;
    let total = p
        .get("total")
        .and_then(Value::as_f64)
        .map(|t| format!("/{t}"))
        .unwrap_or_default();
    let message = p
        .get("message")
        .and_then(Value::as_str)
        .map(|m| format!(" {m}"))
        .unwrap_or_default();
    output::warn(&format!("progress {}{total}{message}", p["progress"]));
}

/// The result content, unpacked: JSON text pretty-printed, other text as
/// is, other content summarized.
fn render(result: &Value) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let content = result["content"].as_array().cloned().unwrap_or_default();
    for item in &content {
        match item["type"].as_str().unwrap_or("") {
            "text" => {
                let text = item["text"].as_str().unwrap_or_default();
                match serde_json::from_str::<Value>(text) {
                    Ok(v @ (Value::Object(_) | Value::Array(_))) => {
                        let _ = writeln!(
                            out,
                            "{}",
                            serde_json::to_string_pretty(&v).unwrap_or_default()
                        );
                    }
                    _ => {
                        let _ = writeln!(out, "{}", text.trim_end_matches('\n'));
                    }
                }
            }
            kind @ ("image" | "audio") => {
                let bytes = item["data"].as_str().map_or(0, |d| d.len() * 3 / 4);
                let _ = writeln!(
                    out,
                    "[{kind}: {}, about {bytes} bytes]",
                    item["mimeType"].as_str().unwrap_or("?")
                );
            }
            "resource" => {
                let r = &item["resource"];
                let _ = writeln!(out, "[resource: {}]", r["uri"].as_str().unwrap_or("?"));
                if let Some(text) = r["text"].as_str() {
                    let _ = writeln!(out, "{}", text.trim_end_matches('\n'));
                }
            }
            "resource_link" => {
                let _ = writeln!(
                    out,
                    "[link: {} {}]",
                    item["uri"].as_str().unwrap_or("?"),
                    item["name"].as_str().unwrap_or("")
                );
            }
            other => {
                let _ = writeln!(out, "[{other} content]");
            }
        }
    }
    if content.is_empty() {
        if let Some(s) = result.get("structuredContent") {
            let _ = writeln!(
                out,
                "{}",
                serde_json::to_string_pretty(s).unwrap_or_default()
            );
        }
    }
    out
}
