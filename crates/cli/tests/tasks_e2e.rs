//! Tasks through `mcpvisor serve`: two fake workers (`--tasks`) that both
//! give the task id `task-1`, each reached by its namespaced id.

mod support;

use mcpvisor_jsonrpc::{INVALID_PARAMS, METHOD_NOT_FOUND};
use serde_json::{Value, json};
use support::{Proc, fake_worker, temp_dir};

fn logged(log: &std::path::Path, method: &str) -> usize {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.split(' ').next() == Some(method))
        .count()
}

#[test]
fn two_servers_with_the_same_task_id_are_each_reached_through_serve() {
    let dir = temp_dir("serve-tasks");
    let config = dir.join("mcp.json");
    let entry = |name: &str| {
        let log = dir.join(format!("{name}.log")).display().to_string();
        json!({"command": fake_worker().display().to_string(), "args": ["--tasks", "--log-file", log]})
    };
    let text = json!({"mcpServers": {"a": entry("a"), "b": entry("b")}});
    std::fs::write(&config, text.to_string()).expect("config");
    let mut p = Proc::spawn(&[
        "serve".into(),
        "--config".into(),
        config.display().to_string(),
    ]);
    let init = p.initialize();
    assert_eq!(
        init["result"]["capabilities"]["tasks"],
        json!({"cancel": {}, "requests": {"tools": {"call": {}}}}),
        "{init}"
    );
    for (n, server) in ["a", "b"].into_iter().enumerate() {
        let r = p.request(
            json!(n),
            "tools/call",
            json!({"name": format!("{server}__echo"), "arguments": {}, "task": {"ttl": 60000}}),
        );
        assert_eq!(
            r["result"]["task"]["taskId"],
            format!("{server}__task-1"),
            "{r}"
        );
    }
    for (n, server) in ["b", "a"].into_iter().enumerate() {
        let id = format!("{server}__task-1");
        let r = p.request(json!(10 + n), "tasks/get", json!({"taskId": id}));
        assert_eq!(r["result"]["taskId"], id, "{r}");
        assert_eq!(r["result"]["status"], "completed", "{r}");
        assert_eq!(logged(&dir.join(format!("{server}.log")), "tasks/get"), 1);
        let r = p.request(json!(20 + n), "tasks/result", json!({"taskId": id}));
        let related: &Value = &r["result"]["_meta"]["io.modelcontextprotocol/related-task"];
        assert_eq!(related["taskId"], id, "{r}");
    }
    let r = p.request(json!(30), "tasks/get", json!({"taskId": "c__task-1"}));
    assert_eq!(r["error"]["code"], INVALID_PARAMS, "{r}");
    let r = p.request(json!(31), "tasks/cancel", json!({"taskId": "a__task-9"}));
    assert_eq!(r["error"]["code"], INVALID_PARAMS, "{r}");
    let r = p.request(json!(32), "tasks/list", json!({}));
    assert_eq!(r["error"]["code"], METHOD_NOT_FOUND, "{r}");
    p.close_stdin();
    assert!(p.wait_exit(support::WAIT).success());
}
