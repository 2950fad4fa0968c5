//! `/metrics`: the gateway's figures in Prometheus' text format.

use std::fmt::Write as _;
use std::sync::Arc;

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use mcpvisor_gateway::audit::{Audit, ToolStats};
use mcpvisor_gateway::monitor::{LATENCY_BUCKETS, ServerState, ServerStatus, Snapshot};

use crate::api::{ApiError, Shared};

/// Every state a server may be in, as `/metrics` names them.
const STATES: [(ServerState, &str); 9] = [
    (ServerState::Starting, "starting"),
    (ServerState::Ready, "ready"),
    (ServerState::Reloading, "reloading"),
    (ServerState::Restarting, "restarting"),
    (ServerState::Failed, "failed"),
    (ServerState::WaitingAuth, "waiting_auth"),
    (ServerState::Idle, "idle"),
    (ServerState::Stopped, "stopped"),
    (ServerState::Disabled, "disabled"),
];

pub(crate) async fn metrics(State(shared): State<Arc<Shared>>) -> Result<Response, ApiError> {
    let snapshot = shared.cfg.monitor.snapshot().await?;
    let mut errors = Vec::with_capacity(snapshot.servers.len());
    for server in &snapshot.servers {
        let by_code = shared
            .cfg
            .monitor
            .server(&server.name)
            .await?
            .map(|d| d.errors_by_code.into_iter().collect::<Vec<_>>())
            .unwrap_or_default();
        errors.push(by_code);
    }
    Ok((
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        // Names and states only; redacted all the same, as every answer is.
        mcpvisor_config::redact::global()
            .redact(&(render(&snapshot, &errors) + &render_tools(shared.cfg.monitor.activity())))
            .into_owned(),
    )
        .into_response())
}

/// The text of `/metrics`; `errors[i]` are the errors by code of
/// `snapshot.servers[i]`.
fn render(snapshot: &Snapshot, errors: &[Vec<(i64, u64)>]) -> String {
    let mut out = String::new();
    let servers = &snapshot.servers;
    family(
        &mut out,
        "mcpvisor_server_calls_total",
        "counter",
        "Front requests routed to the server.",
    );
    for s in servers {
        let _ = writeln!(
            out,
            "mcpvisor_server_calls_total{{server=\"{}\"}} {}",
            label(&s.name),
            s.calls
        );
    }
    family(
        &mut out,
        "mcpvisor_server_errors_total",
        "counter",
        "Requests answered with an error, by JSON-RPC code.",
    );
    for (s, by_code) in servers.iter().zip(errors) {
        for (code, n) in by_code {
            let _ = writeln!(
                out,
                "mcpvisor_server_errors_total{{server=\"{}\",code=\"{code}\"}} {n}",
                label(&s.name)
            );
        }
    }
    family(
        &mut out,
        "mcpvisor_server_latency_seconds",
        "histogram",
        "Time from a request to its answer.",
    );
    for s in servers {
        latency(&mut out, s);
    }
    family(
        &mut out,
        "mcpvisor_server_restarts_total",
        "counter",
        "Times the server was started again.",
    );
    for s in servers {
        let _ = writeln!(
            out,
            "mcpvisor_server_restarts_total{{server=\"{}\"}} {}",
            label(&s.name),
            s.restarts
        );
    }
    family(
        &mut out,
        "mcpvisor_server_state",
        "gauge",
        "1 for the server's current state, 0 for the others.",
    );
    for s in servers {
        for (state, name) in STATES {
            let _ = writeln!(
                out,
                "mcpvisor_server_state{{server=\"{}\",state=\"{name}\"}} {}",
                label(&s.name),
                u8::from(s.state == state)
            );
        }
    }
    family(
        &mut out,
        "mcpvisor_server_in_flight",
        "gauge",
        "Requests the server is working on.",
    );
    for s in servers {
        let _ = writeln!(
            out,
            "mcpvisor_server_in_flight{{server=\"{}\"}} {}",
            label(&s.name),
            s.in_flight
        );
    }
    family(
        &mut out,
        "mcpvisor_server_quarantined",
        "gauge",
        "The server's definitions held back from clients until a person approves them.",
    );
    for s in servers {
        let _ = writeln!(
            out,
            "mcpvisor_server_quarantined{{server=\"{}\"}} {}",
            label(&s.name),
            s.quarantined
        );
    }
    family(
        &mut out,
        "mcpvisor_front_sessions",
        "gauge",
        "Client sessions open on the gateway's fronts.",
    );
    let _ = writeln!(out, "mcpvisor_front_sessions {}", snapshot.sessions);
    out
}

/// Per-tool figures from the audit trail, and its dropped records.
fn render_tools(audit: &Audit) -> String {
    let mut out = String::new();
    let tools = audit.tools();
    family(
        &mut out,
        "mcpvisor_tool_calls_total",
        "counter",
        "Tool calls answered, by server, tool (as clients call it; _other past the first 500 pairs) and outcome (result, is_error, error).",
    );
    for t in &tools {
        for (outcome, n) in [
            ("result", t.results),
            ("is_error", t.is_errors),
            ("error", t.errors),
        ] {
            let _ = writeln!(
                out,
                "mcpvisor_tool_calls_total{{server=\"{}\",tool=\"{}\",outcome=\"{outcome}\"}} {n}",
                label(&t.server),
                label(&t.tool)
            );
        }
    }
    family(
        &mut out,
        "mcpvisor_tool_latency_seconds",
        "histogram",
        "Time from a tool call reaching the gateway to its answer.",
    );
    for t in &tools {
        tool_latency(&mut out, t);
    }
    family(
        &mut out,
        "mcpvisor_audit_dropped_total",
        "counter",
        "Audit records left out of the audit log because its writer was behind.",
    );
    let _ = writeln!(out, "mcpvisor_audit_dropped_total {}", audit.dropped());
    out
}

fn tool_latency(out: &mut String, t: &ToolStats) {
    let labels = format!(
        "server=\"{}\",tool=\"{}\"",
        label(&t.server),
        label(&t.tool)
    );
    let mut cumulative = 0;
    for (i, le) in LATENCY_BUCKETS.iter().enumerate() {
        cumulative += t.buckets.get(i).copied().unwrap_or(0);
        let _ = writeln!(
            out,
            "mcpvisor_tool_latency_seconds_bucket{{{labels},le=\"{le}\"}} {cumulative}"
        );
    }
    let total: u64 = t.buckets.iter().sum();
    let _ = writeln!(
        out,
        "mcpvisor_tool_latency_seconds_bucket{{{labels},le=\"+Inf\"}} {total}"
    );
    let _ = writeln!(
        out,
        "mcpvisor_tool_latency_seconds_sum{{{labels}}} {}",
        t.sum_seconds
    );
    let _ = writeln!(
        out,
        "mcpvisor_tool_latency_seconds_count{{{labels}}} {total}"
    );
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// One server's histogram: cumulative buckets, `+Inf`, sum and count.
fn latency(out: &mut String, s: &ServerStatus) {
    let name = label(&s.name);
    let mut cumulative = 0;
    for (i, le) in LATENCY_BUCKETS.iter().enumerate() {
        cumulative += s.latency.buckets.get(i).copied().unwrap_or(0);
        let _ = writeln!(
            out,
            "mcpvisor_server_latency_seconds_bucket{{server=\"{name}\",le=\"{le}\"}} {cumulative}"
        );
    }
    // The `+Inf` bucket is every observation, whatever the buckets held.
    let total = s.latency.count.max(
        cumulative
            + s.latency
                .buckets
                .get(LATENCY_BUCKETS.len())
                .copied()
                .unwrap_or(0),
    );
    let _ = writeln!(
        out,
        "mcpvisor_server_latency_seconds_bucket{{server=\"{name}\",le=\"+Inf\"}} {total}"
    );
    let _ = writeln!(
        out,
        "mcpvisor_server_latency_seconds_sum{{server=\"{name}\"}} {}",
        s.latency.sum_seconds
    );
    let _ = writeln!(
        out,
        "mcpvisor_server_latency_seconds_count{{server=\"{name}\"}} {total}"
    );
}

/// A label value with `\`, `"` and newlines escaped.
fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use mcpvisor_gateway::monitor::Latency;

    use super::*;

    fn status(name: &str, state: ServerState) -> ServerStatus {
        ServerStatus {
            name: name.to_owned(),
            state,
            detail: None,
            next_try_at_ms: None,
            auth_url: None,
            auth_reason: None,
            lazy: false,
            transport: "stdio",
            command: "x".to_owned(),
            generation: Some(1),
            pid: Some(2),
            started_at_ms: Some(3),
            restarts: 4,
            calls: 10,
            errors: 2,
            in_flight: 1,
            instances: Vec::new(),
            twin: None,
            stderr: Vec::new(),
            quarantined: 3,
            latency: Latency {
                p50_ms: Some(1.0),
                p99_ms: Some(9.0),
                buckets: {
                    let mut b = vec![0; LATENCY_BUCKETS.len() + 1];
                    b[0] = 3;
                    b[2] = 5;
                    b[LATENCY_BUCKETS.len()] = 2;
                    b
                },
                sum_seconds: 0.5,
                count: 10,
            },
        }
    }

    #[test]
    fn the_series_and_their_values() {
        let snapshot = Snapshot {
            servers: vec![status("a\"b", ServerState::Ready)],
            sessions: 2,
        };
        let text = render(&snapshot, &[vec![(-32010, 2)]]);
        for line in [
            "mcpvisor_server_calls_total{server=\"a\\\"b\"} 10",
            "mcpvisor_server_errors_total{server=\"a\\\"b\",code=\"-32010\"} 2",
            "mcpvisor_server_latency_seconds_bucket{server=\"a\\\"b\",le=\"0.001\"} 3",
            "mcpvisor_server_latency_seconds_bucket{server=\"a\\\"b\",le=\"0.0025\"} 3",
            "mcpvisor_server_latency_seconds_bucket{server=\"a\\\"b\",le=\"0.005\"} 8",
            "mcpvisor_server_latency_seconds_bucket{server=\"a\\\"b\",le=\"30\"} 8",
            "mcpvisor_server_latency_seconds_bucket{server=\"a\\\"b\",le=\"+Inf\"} 10",
            "mcpvisor_server_latency_seconds_sum{server=\"a\\\"b\"} 0.5",
            "mcpvisor_server_latency_seconds_count{server=\"a\\\"b\"} 10",
            "mcpvisor_server_restarts_total{server=\"a\\\"b\"} 4",
            "mcpvisor_server_state{server=\"a\\\"b\",state=\"ready\"} 1",
            "mcpvisor_server_state{server=\"a\\\"b\",state=\"failed\"} 0",
            "mcpvisor_server_in_flight{server=\"a\\\"b\"} 1",
            "mcpvisor_server_quarantined{server=\"a\\\"b\"} 3",
            "mcpvisor_front_sessions 2",
            "# TYPE mcpvisor_server_latency_seconds histogram",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
    }
}
