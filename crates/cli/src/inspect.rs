//! `mcpvisor inspect`: start a server, show what it offers, stop it.

use std::process::ExitCode;
use std::time::Duration;

use serde_json::{Value, json};

use crate::cli::InspectArgs;
use crate::output;
use crate::probe::{self, Failed, Probe};

/// Each list, by the capability that declares it.
const LISTS: [(&str, &str, &str); 4] = [
    ("tools", "tools/list", "tools"),
    ("prompts", "prompts/list", "prompts"),
    ("resources", "resources/list", "resources"),
    ("resources", "resources/templates/list", "resourceTemplates"),
];

pub fn main(args: InspectArgs) -> ExitCode {
    let json_out = args.server.json;
    let limit = args.server.timeout;
    let code = probe::run(
        &args.server,
        args.name.as_deref(),
        &args.command,
        move |probe| async move {
            let result = inspect(&probe, limit).await.map(|report| {
                let text = if json_out {
                    let mut json = serde_json::to_string_pretty(&report).unwrap_or_default();
                    json.push('\n');
                    json
                } else {
                    human(&report)
                };
                output::print(&text).map_or_else(|e| e.report(), |()| 0)
            });
            (probe, result)
        },
    );
    ExitCode::from(code)
}

/// The stable JSON schema of `inspect --json`.
async fn inspect(p: &Probe, limit: Duration) -> Result<Value, Failed> {
    let caps = &p.init.capabilities;
    let mut lists = serde_json::Map::new();
    for (cap, method, key) in LISTS {
        if !caps.get(cap).is_some_and(Value::is_object) {
            continue;
        }
        let items = match p.conn.list_all(method, key, limit).await {
            Ok(items) => items,
            // A server may declare resources without templates.
            Err(mcpvisor_runner::CallError::Rpc { code: -32601, .. })
                if key == "resourceTemplates" =>
            {
                Vec::new()
            }
            Err(e) => return Err(e.into()),
        };
        lists.insert(key.into(), Value::Array(items));
    }
    let filter = &p.chosen.spec.def.tools;
    let mut hidden = 0;
    let tools: Vec<Value> = lists
        .remove("tools")
        .and_then(|t| t.as_array().cloned())
        .unwrap_or_default()
        .into_iter()
        .filter(|t| {
            let ok = filter.permits(t["name"].as_str().unwrap_or_default());
            hidden += usize::from(!ok);
            ok
        })
        .map(|t| {
            json!({
                "name": t["name"],
                "title": t.get("title").cloned().unwrap_or(Value::Null),
                "description": t.get("description").cloned().unwrap_or(Value::Null),
                "arguments": arguments(&t["inputSchema"]),
                "inputSchema": t.get("inputSchema").cloned().unwrap_or(Value::Null),
            })
        })
        .collect();
    Ok(json!({
        "server": p.init.server_info,
        "protocolVersion": p.init.protocol_version,
        "capabilities": caps,
        "instructions": p.init.instructions,
        "tools": tools,
        "toolsHiddenByFilter": hidden,
        "prompts": lists.remove("prompts").unwrap_or(json!([])),
        "resources": lists.remove("resources").unwrap_or(json!([])),
        "resourceTemplates": lists.remove("resourceTemplates").unwrap_or(json!([])),
        "startupMs": p.startup.as_millis() as u64,
        "totalMs": p.started.elapsed().as_millis() as u64,
    }))
}

/// `[{name, type, required, description}]` from a JSON schema's properties.
fn arguments(schema: &Value) -> Value {
    let required: Vec<&str> = schema["required"]
        .as_array()
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let Some(props) = schema["properties"].as_object() else {
        return json!([]);
    };
    Value::Array(
        props
            .iter()
            .map(|(name, p)| {
                let ty = match &p["type"] {
                    Value::String(t) => t.clone(),
                    Value::Array(ts) => ts
                        .iter()
                        .filter_map(Value::as_str)
                        .collect::<Vec<_>>()
                        .join("|"),
                    _ if p.get("enum").is_some() => "enum".into(),
                    _ => "any".into(),
                };
                json!({
                    "name": name,
                    "type": ty,
                    "required": required.contains(&name.as_str()),
                    "description": p.get("description").cloned().unwrap_or(Value::Null),
                })
            })
            .collect(),
    )
}

fn first_line(v: &Value) -> String {
    let text = v.as_str().unwrap_or_default();
    let line = text
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or_default()
        .trim();
    if line.chars().count() > 100 {
        format!("{}…", line.chars().take(99).collect::<String>())
    } else {
        line.to_owned()
    }
}

fn human(r: &Value) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let name = r["server"]["name"].as_str().unwrap_or("(unnamed)");
    let version = r["server"]["version"].as_str().unwrap_or("");
    let _ = writeln!(out, "server     {name} {version}");
    let _ = writeln!(
        out,
        "protocol   {}",
        r["protocolVersion"].as_str().unwrap_or("?")
    );
    let caps: Vec<String> = r["capabilities"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| {
                    let flags: Vec<&str> = v
                        .as_object()
                        .map(|f| {
                            f.iter()
                                .filter(|(_, on)| **on == Value::Bool(true))
                                .map(|(f, _)| f.as_str())
                                .collect()
                        })
                        .unwrap_or_default();
                    if flags.is_empty() {
                        k.clone()
                    } else {
                        format!("{k} ({})", flags.join(", "))
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    let _ = writeln!(
        out,
        "offers     {}",
        if caps.is_empty() {
            "nothing".into()
        } else {
            caps.join(", ")
        }
    );
    if let Some(text) = r["instructions"].as_str() {
        let _ = writeln!(
            out,
            "about      {}",
            first_line(&Value::String(text.into()))
        );
    }
    let _ = writeln!(out, "started in {} ms", r["startupMs"]);
    let tools = r["tools"].as_array().cloned().unwrap_or_default();
    let _ = writeln!(out, "\ntools ({}):", tools.len());
    let width = tools
        .iter()
        .filter_map(|t| t["name"].as_str())
        .map(str::len)
        .max()
        .unwrap_or(0)
        .min(40);
    for t in &tools {
        let args: Vec<String> = t["arguments"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|x| {
                        let star = if x["required"] == true { "" } else { "?" };
                        format!(
                            "{}{star}: {}",
                            x["name"].as_str().unwrap_or(""),
                            x["type"].as_str().unwrap_or("")
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "  {:width$}  {}",
            t["name"].as_str().unwrap_or(""),
            first_line(&t["description"])
        );
        let _ = writeln!(out, "  {:width$}  ({})", "", args.join(", "));
    }
    if r["toolsHiddenByFilter"].as_u64().unwrap_or(0) > 0 {
        let _ = writeln!(
            out,
            "  ({} more hidden by the config's tools filter)",
            r["toolsHiddenByFilter"]
        );
    }
    for (key, label, id) in [
        ("prompts", "prompts", "name"),
        ("resources", "resources", "uri"),
        ("resourceTemplates", "resource templates", "uriTemplate"),
    ] {
        let items = r[key].as_array().cloned().unwrap_or_default();
        if items.is_empty()
            && r["capabilities"]
                .get(if key == "resourceTemplates" {
                    "resources"
                } else {
                    key
                })
                .is_none()
        {
            continue;
        }
        let _ = writeln!(out, "\n{label} ({}):", items.len());
        for i in &items {
            let desc = first_line(i.get("description").unwrap_or(&Value::Null));
            let _ = writeln!(out, "  {}  {}", i[id].as_str().unwrap_or(""), desc);
        }
    }
    out
}
