//! An entry's overrides of its server's tool definitions
//! (`"tools": {"override": {...}}`), applied to each backend's `tools/list`
//! as the gateway takes it in: before the lists are merged, cached or shown,
//! so that everything downstream sees the entry's title, description and
//! annotations as if the server had written them.
//!
//! A tool without an override keeps the bytes its server wrote; one with an
//! override is rewritten compactly.

use std::collections::BTreeMap;

use mcpvisor_config::ToolOverride;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

/// Rewrites the tools of one `tools/list` read (every page) that an
/// override names. Returns the overridden names the server did not list,
/// sorted, for a warning: an override for a tool that is not there is most
/// likely a typo, or a tool the server renamed.
pub(crate) fn apply(
    overrides: &BTreeMap<String, ToolOverride>,
    tools: &mut [Box<RawValue>],
) -> Vec<String> {
    if overrides.is_empty() {
        return Vec::new();
    }
    let mut unseen: Vec<&String> = overrides.keys().collect();
    for tool in tools.iter_mut() {
        let Ok(mut item) = serde_json::from_str::<Map<String, Value>>(tool.get()) else {
            continue;
        };
        let Some(over) = item
            .get("name")
            .and_then(Value::as_str)
            .and_then(|name| overrides.get_key_value(name))
        else {
            continue;
        };
        unseen.retain(|name| *name != over.0);
        over.1.apply(&mut item);
        if let Ok(raw) = serde_json::value::to_raw_value(&item) {
            *tool = raw;
        }
    }
    unseen.into_iter().cloned().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(text: &str) -> Box<RawValue> {
        RawValue::from_string(text.to_owned()).expect("valid JSON")
    }

    #[test]
    fn only_named_tools_are_rewritten_and_missing_names_are_returned() {
        let overrides = BTreeMap::from([
            (
                "echo".to_owned(),
                ToolOverride {
                    description: Some("Repeats its input.".into()),
                    ..ToolOverride::default()
                },
            ),
            ("gone".to_owned(), ToolOverride::default()),
        ]);
        let untouched = r#"{ "name": "add",  "description": "Adds." }"#;
        let mut tools = vec![
            raw(untouched),
            raw(r#"{"name":"echo","description":"Echoes.","inputSchema":{"type":"object"}}"#),
        ];
        let unseen = apply(&overrides, &mut tools);
        assert_eq!(unseen, ["gone"]);
        assert_eq!(
            tools[0].get(),
            untouched,
            "a tool without override keeps its bytes"
        );
        let echo: Value = serde_json::from_str(tools[1].get()).expect("JSON");
        assert_eq!(echo["description"], "Repeats its input.");
        assert_eq!(echo["inputSchema"]["type"], "object");
    }

    #[test]
    fn no_overrides_touch_nothing() {
        let mut tools = vec![raw(r#"{"name":"echo"}"#)];
        assert!(apply(&BTreeMap::new(), &mut tools).is_empty());
        assert_eq!(tools[0].get(), r#"{"name":"echo"}"#);
    }
}
