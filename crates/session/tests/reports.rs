//! What the `error.data` of a lost request says about the server, on paused
//! time with in-process workers.

mod support;

use mcpvisor_session::Config;
use serde_json::json;
use support::{Behaviour, Client, TestSpawner, config};

#[tokio::test(start_paused = true)]
async fn stray_stdout_is_counted_in_error_data_and_shown_only_when_asked() {
    for shown in [false, true] {
        let cfg = Config {
            stdout_in_errors: shown,
            ..config()
        };
        let mut c = Client::start(cfg, TestSpawner::new(Behaviour::default()));
        c.initialize().await;
        // The worker prints `this is not json`, then answers.
        let ok = c.call(json!(1), "garbage", json!({})).await;
        assert_eq!(ok["result"]["generation"], 1, "{ok}");
        let lost = c.call(json!(2), "crash", json!({})).await;
        assert_eq!(lost["error"]["code"], -32010, "{lost}");
        let stray = &lost["error"]["data"]["stray_stdout"];
        assert_eq!(stray["lines"], 1, "{lost}");
        assert_eq!(stray["bytes"], "this is not json".len(), "{lost}");
        if shown {
            assert_eq!(stray["heads"], json!(["this is not json"]), "{lost}");
        } else {
            assert!(stray.get("heads").is_none(), "{lost}");
            assert!(!lost.to_string().contains("this is not json"), "{lost}");
        }
        // The count is per generation: the next one starts clean.
        c.call(json!(3), "echo", json!({})).await;
        let lost = c.call(json!(4), "crash", json!({})).await;
        assert!(
            lost["error"]["data"].get("stray_stdout").is_none(),
            "{lost}"
        );
    }
}
