//! The checks run once a seed is over, on everything each front received.

use std::collections::HashMap;

use mcpvisor_jsonrpc::PARSE_ERROR;
use serde_json::{Value, json};

use crate::REUSED_ID;
use crate::driver::{Driver, Era, Front, Tool, whoami_pid};

/// The checks, over everything one front received.
pub struct Checker<'a> {
    pub d: &'a Driver,
    /// Which front.
    pub at: usize,
    pub f: &'a Front,
    /// Position of each answer in its stream, by id as JSON text.
    pub answers: HashMap<String, Vec<usize>>,
}

impl Checker<'_> {
    /// Checks the shape of everything front `at` received: responses with
    /// a result or an error, on a 2026-07-28 front every result `complete`
    /// and no notification it did not ask for, one parse error per line
    /// that was not JSON, each related to no request.
    pub fn new(d: &Driver, at: usize) -> Checker<'_> {
        let seed = d.seed;
        let f = &d.fronts[at];
        let mut answers: HashMap<String, Vec<usize>> = HashMap::new();
        let mut parse_errors = 0;
        for (pos, m) in f.log.iter().enumerate() {
            assert_eq!(m["jsonrpc"], "2.0", "seed {seed}, front {at}: {m}");
            match (m.get("id"), m.get("method")) {
                (Some(id), None) => {
                    assert!(
                        m.get("result").is_some() != m.get("error").is_some(),
                        "seed {seed}, front {at}: a response needs a result or an error: {m}"
                    );
                    // Which results may be input-required rounds is
                    // checked call by call.
                    if f.era == Era::Modern && m.get("result").is_some() {
                        let kind = &m["result"]["resultType"];
                        assert!(
                            kind == "complete" || kind == "input_required",
                            "seed {seed}, front {at}: a 2026-07-28 result without its resultType: {m}"
                        );
                    }
                    if id.is_null() && m["error"]["code"] == PARSE_ERROR {
                        assert!(
                            !f.relates || f.related[pos].is_none(),
                            "seed {seed}, front {at}: a parse error related to {:?}",
                            f.related[pos]
                        );
                        parse_errors += 1;
                        continue;
                    }
                    if f.relates {
                        assert_eq!(
                            f.related[pos].as_deref(),
                            Some(id.to_string().as_str()),
                            "seed {seed}, front {at}: an answer related to another request: {m}"
                        );
                    }
                    answers.entry(id.to_string()).or_default().push(pos);
                }
                (None, Some(method)) => {
                    let method = method.as_str().unwrap_or_default();
                    assert!(
                        method.starts_with("notifications/"),
                        "seed {seed}, front {at}: not a notification: {m}"
                    );
                    // A 2026-07-28 client hears of list changes only on a
                    // listen, and opened none.
                    assert!(
                        f.era == Era::Handshake || method == "notifications/progress",
                        "seed {seed}, front {at}: a 2026-07-28 front told what it did not ask for: {m}"
                    );
                }
                // Nothing here asks the client anything.
                _ => panic!("seed {seed}, front {at}: neither a response nor a notification: {m}"),
            }
        }
        assert_eq!(
            parse_errors, f.garbage,
            "seed {seed}, front {at}: one parse error per line that was not JSON"
        );
        Checker { d, at, f, answers }
    }

    fn positions(&self, id: &Value) -> &[usize] {
        self.answers
            .get(&id.to_string())
            .map_or(&[][..], Vec::as_slice)
    }

    /// The gateway's own answers come once each. (That every answer goes
    /// to an id the client used is checked as lines arrive.)
    pub fn plain_answers_come_once(&self) {
        let (seed, at) = (self.d.seed, self.at);
        for id in &self.f.plain {
            let seen = self.positions(id);
            assert_eq!(
                seen.len(),
                1,
                "seed {seed}, front {at}: {id} answered {} times",
                seen.len()
            );
            let m = &self.f.log[seen[0]];
            assert!(m.get("result").is_some(), "seed {seed}, front {at}: {m}");
            if self.f.era == Era::Modern {
                assert_eq!(
                    m["result"]["resultType"], "complete",
                    "seed {seed}, front {at}: {m}"
                );
            }
        }
    }

    /// Each call gets at most one answer, exactly one unless cancelled, and
    /// none once the gateway took its cancel; a reused id gets one answer
    /// per call. Returns where each call was answered.
    pub fn answers_match_calls(&self) -> HashMap<usize, usize> {
        let (seed, at) = (self.d.seed, self.at);
        let mut answered_at = HashMap::new();
        for (id, calls) in &self.f.by_id {
            let seen = self.positions(&self.d.calls[calls[0]].id);
            match calls.as_slice() {
                [k] => {
                    let c = &self.d.calls[*k];
                    assert!(
                        seen.len() <= 1,
                        "seed {seed}, front {at}: call {id} answered {} times: {:#?}",
                        seen.len(),
                        seen.iter().map(|p| &self.f.log[*p]).collect::<Vec<_>>()
                    );
                    if let Some(barrier) = &c.barrier {
                        let cut = self.positions(barrier)[0];
                        if let Some(p) = seen.first() {
                            assert!(
                                *p < cut,
                                "seed {seed}, front {at}: call {id} answered after its cancel was taken: {}",
                                self.f.log[*p]
                            );
                        }
                    } else {
                        assert_eq!(
                            seen.len(),
                            1,
                            "seed {seed}, front {at}: call {id} ({c:?}) never answered"
                        );
                    }
                    if let Some(p) = seen.first() {
                        if let Err(e) = self.d.fits(*k, *p) {
                            panic!(
                                "seed {seed}, front {at}: call {id} ({c:?}): {e}: {}",
                                self.f.log[*p]
                            );
                        }
                        answered_at.insert(*k, *p);
                    }
                }
                [first, second] => {
                    assert_eq!(
                        seen.len(),
                        2,
                        "seed {seed}, front {at}: id {id}, used by two calls, answered {} times",
                        seen.len()
                    );
                    let orders = [[*first, *second], [*second, *first]];
                    let fitting = orders.iter().find(|o| {
                        self.d.fits(o[0], seen[0]).is_ok() && self.d.fits(o[1], seen[1]).is_ok()
                    });
                    let Some(order) = fitting else {
                        panic!(
                            "seed {seed}, front {at}: id {id}: the answers {} and {} do not fit its calls {:?} and {:?} ({:?}, {:?} the other way round)",
                            self.f.log[seen[0]],
                            self.f.log[seen[1]],
                            self.d.calls[*first],
                            self.d.calls[*second],
                            self.d.fits(*second, seen[0]),
                            self.d.fits(*first, seen[1]),
                        );
                    };
                    answered_at.insert(order[0], seen[0]);
                    answered_at.insert(order[1], seen[1]);
                    // The second call was refused if and only if the first
                    // was still in flight: answered after the refusal. (An
                    // answer to the second before the first's means the
                    // gateway held both under one id.)
                    let refused = self.f.log[answered_at[second]]["error"]["message"]
                        .as_str()
                        .is_some_and(|m| m.contains(REUSED_ID));
                    let first_still_open = answered_at[second] < answered_at[first];
                    assert_eq!(
                        refused, first_still_open,
                        "seed {seed}, front {at}: id {id}: its reuse answered {} and its first call {}",
                        self.f.log[answered_at[second]], self.f.log[answered_at[first]]
                    );
                }
                _ => panic!("seed {seed}, front {at}: id {id} used by more than two calls"),
            }
        }
        answered_at
    }

    /// Progress carries the client's own token and comes only while its
    /// call is live: after it was sent, before its answer, before its
    /// cancel was taken. It is the call's own: `sleep` counts 1, 2, ... up
    /// to its own total, all of it before a result.
    pub fn progress_is_the_calls_own(&self, answered_at: &HashMap<usize, usize>) {
        let (seed, at) = (self.d.seed, self.at);
        // Fronts use the same tokens: only this front's count.
        let by_token: HashMap<String, usize> = self
            .d
            .calls
            .iter()
            .enumerate()
            .filter(|(_, c)| c.front == at)
            .filter_map(|(k, c)| Some((c.token.as_ref()?.to_string(), k)))
            .collect();
        let mut counted: HashMap<usize, u64> = HashMap::new();
        for (pos, m) in self.f.log.iter().enumerate() {
            if m["method"] != "notifications/progress" {
                continue;
            }
            let token = &m["params"]["progressToken"];
            let Some(&k) = by_token.get(&token.to_string()) else {
                panic!("seed {seed}, front {at}: progress with a token the client never sent: {m}");
            };
            let c = &self.d.calls[k];
            if self.f.relates {
                assert_eq!(
                    self.f.related[pos].as_deref(),
                    Some(c.id.to_string().as_str()),
                    "seed {seed}, front {at}: progress for call {} related to another request: {m}",
                    c.id
                );
            }
            let live_until = [
                answered_at.get(&k).copied(),
                c.barrier.as_ref().map(|b| self.positions(b)[0]),
            ]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(usize::MAX);
            assert!(
                c.sent <= pos && pos < live_until,
                "seed {seed}, front {at}: progress for call {} when it was not live: {m}",
                c.id
            );
            let Tool::Sleep { ms, every } = c.tool else {
                panic!("seed {seed}, front {at}: progress for a call that makes none ({c:?}): {m}");
            };
            let count = counted.entry(k).or_default();
            *count += 1;
            let expected = json!({"progress": *count, "total": (ms - 1) / every});
            assert!(
                m["params"]["progress"] == expected["progress"]
                    && m["params"]["total"] == expected["total"],
                "seed {seed}, front {at}: progress for call {} is not its own (expected {expected}): {m}",
                c.id
            );
        }
        for (&k, &pos) in answered_at {
            let c = &self.d.calls[k];
            if let (Tool::Sleep { ms, every }, Some(_)) = (&c.tool, &c.token) {
                if self.f.log[pos].get("result").is_some() {
                    let got = counted.get(&k).copied().unwrap_or(0);
                    assert_eq!(
                        got,
                        (ms - 1) / every,
                        "seed {seed}, front {at}: call {} has its result after {got} progress notifications",
                        c.id
                    );
                }
            }
        }
    }
}

/// A worker's pid is seen from one server only, whichever front asked.
/// `answered_at` holds where each call was answered in its front's stream.
pub fn pids_stay_with_their_server(d: &Driver, answered_at: &HashMap<usize, usize>) {
    let seed = d.seed;
    let mut owner: HashMap<i32, usize> = HashMap::new();
    for (&k, &pos) in answered_at {
        let c = &d.calls[k];
        if c.tool != Tool::Whoami {
            continue;
        }
        if let Some(pid) = whoami_pid(&d.fronts[c.front].log[pos]) {
            let first = *owner.entry(pid).or_insert(c.backend);
            assert_eq!(
                first, c.backend,
                "seed {seed}: pid {pid} answered for `{}` and `{}`",
                d.names[first], d.names[c.backend]
            );
        }
    }
}
