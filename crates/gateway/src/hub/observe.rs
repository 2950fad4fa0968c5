//! The hub's answers to a [`crate::monitor::Monitor`].

use crate::monitor::{
    Action, ActionError, Latency, MonitorEvent, Query, ServerDetail, ServerState, ServerStatus,
    Snapshot,
};

use super::Hub;
use super::backend::{Backend, State};

impl Hub {
    pub(crate) async fn on_query(&mut self, query: Query) {
        match query {
            Query::Snapshot(tx) => {
                let _ = tx.send(self.snapshot());
            }
            Query::Server(name, tx) => {
                let detail = self
                    .backends
                    .values()
                    .find(|b| b.plan.name == name)
                    .map(detail_of);
                let _ = tx.send(detail);
            }
            Query::Act(name, action, tx) => {
                let _ = tx.send(self.act(&name, action));
            }
        }
    }

    /// Tells observers how many front sessions are open.
    pub(crate) fn publish_sessions(&self) {
        if let Some(tap) = &self.settings.monitor {
            tap.publish(MonitorEvent::Fronts {
                sessions: self.fronts.len(),
            });
        }
    }

    fn snapshot(&self) -> Snapshot {
        let servers = self
            .order
            .iter()
            .filter_map(|id| self.backends.get(id))
            .map(status_of)
            .collect();
        Snapshot {
            servers,
            sessions: self.fronts.len(),
        }
    }

    fn act(&mut self, name: &str, action: Action) -> Result<(), ActionError> {
        if !self.backends.values().any(|b| b.plan.name == name) {
            return Err(ActionError::NoSuchServer(name.to_owned()));
        }
        match action {
            Action::Reload => {
                self.reload_backend(name);
                Ok(())
            }
            Action::Restart | Action::Stop | Action::Start => Err(ActionError::Refused(
                "this action is not available yet".to_owned(),
            )),
        }
    }
}

fn status_of(b: &Backend) -> ServerStatus {
    let (state, auth_url, detail) = match &b.state {
        State::Idle => (ServerState::Idle, None, None),
        State::Starting => (ServerState::Starting, None, None),
        State::Ready => (ServerState::Ready, None, None),
        State::WaitingAuth(url) => (ServerState::WaitingAuth, Some(url.clone()), None),
        State::Failed(data) => (
            ServerState::Failed,
            None,
            data.get("reason")
                .and_then(|r| r.as_str())
                .map(str::to_owned),
        ),
        State::Disabled => (ServerState::Disabled, None, None),
    };
    let def = &b.plan.def;
    let command = std::iter::once(def.command.as_str())
        .chain(def.args.iter().map(String::as_str))
        .collect::<Vec<_>>()
        .join(" ");
    ServerStatus {
        name: b.plan.name.clone(),
        state,
        detail,
        next_try_at_ms: None,
        auth_url,
        lazy: b.plan.lazy,
        transport: "stdio",
        command,
        generation: None,
        pid: None,
        started_at_ms: None,
        restarts: 0,
        calls: 0,
        errors: 0,
        in_flight: b.in_flight,
        latency: Latency::default(),
    }
}

fn detail_of(b: &Backend) -> ServerDetail {
    let list = |i: usize| -> Vec<serde_json::Value> {
        b.lists[i]
            .iter()
            .flatten()
            .filter_map(|item| serde_json::from_str(item.raw.get()).ok())
            .collect()
    };
    ServerDetail {
        status: status_of(b),
        tools: list(0),
        prompts: list(1),
        resources: list(2),
        errors_by_code: Default::default(),
        events: Vec::new(),
        last_crash: None,
        config_file: None,
        env_file: b.plan.def.env_file.clone(),
        env_keys: Vec::new(),
    }
}
