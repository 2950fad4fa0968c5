//! `mcpvisor-bench soak`: the gateway under steady load for minutes while
//! its servers are killed and its config is edited.
//!
//! `mcpvisor serve --http 127.0.0.1:0` (files not watched) with
//! `--servers` fake workers (`s1`, `s2`, ...) that stay configured, and at
//! times one more, `extra`. `--sessions` clients call it for `--seconds`:
//! Streamable HTTP sessions (2025-06-18), and among them `--stateless`
//! clients of 2026-07-28, whose requests stand alone. Each has two loops,
//! one call after another:
//!
//! - quick calls: the `echo` tool of each server in turn, whose answer
//!   must be the call's own payload (it starts with the call's id), and
//!   every `servers + 1`th call `extra__echo`, whether `extra` is
//!   configured at that moment or not;
//! - slow calls: the `sleep` tool (`--slow-ms`) of a server picked at
//!   random for each call (taken in turn, the loops fall into step with
//!   the kills and keep away from them), with a tag (the call's id) that
//!   the answer must give back.
//!
//! Meanwhile:
//!
//! - every `--kill-every` seconds the process of one server, each in turn,
//!   is SIGKILLed, as the OOM killer would. It is found among the
//!   gateway's children by its environment ([`gateway::SERVER_MARK`]), and
//!   is killed only once it has run [`MIN_AGE`] (a server killed right
//!   after its start is crash-looping, which is another matter);
//! - every `--edit-every` seconds, alternately, the config file is edited
//!   (`extra` added, or removed) and SIGHUP sent, or SIGHUP is sent with
//!   the file unchanged.
//!
//! What must hold, or the run fails:
//!
//! - every request gets exactly one answer, carrying its own id and its
//!   own payload;
//! - a call of a server that stays configured is answered with its result,
//!   or with `-32010` only when that server was killed between the call's
//!   send and its answer (and the error says it ended by SIGKILL);
//! - a call of `extra` is answered with its result; with `-32602 Unknown
//!   tool` (a name that no configured server owns) except when it was sent
//!   after `extra`'s process ran and answered before the SIGHUP that
//!   removed it; or with `-32010` (in flight at the removal) or `-32011`
//!   (queued at the removal) only when it was answered after such a SIGHUP
//!   and sent before `extra`'s process was seen ended (the gateway applies
//!   the removal in between), and the error says it was removed;
//! - no server that stays configured is restarted except by a kill (a
//!   SIGHUP that changes nothing of it leaves its process alone);
//! - an added `extra` runs, and a removed one ends, within
//!   [`EDIT_TIMEOUT`];
//! - every session (and every 2026-07-28 client) still works at the end:
//!   each calls every server once more, after the churn stopped;
//! - the gateway's VmRSS (sampled every second) at the end is at most its
//!   VmRSS after `--warmup` × `--rss-factor` + `--rss-slack-mib`;
//! - after SIGTERM the gateway ends by itself within the stop timeout, and
//!   no process carrying this run's mark is left.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{Context as _, ensure};
use mcpvisor_jsonrpc::{INVALID_PARAMS, NOT_STARTED, WORKER_LOST};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde::Serialize;
use serde_json::Value;
use tokio::time::Instant;

use crate::gateway::{self, Gateway, Server};
use crate::http::{Client, Front, Session, check_echo, join_all, snippet_of};
use crate::machine;
use crate::payload::{Echo, Payloads, Scratch};
use crate::peer::Binaries;
use crate::scenario::progress;
use crate::stats::Latencies;

/// The server that comes and goes.
const EXTRA: &str = "extra";
/// A server's process is killed only once it has run this long: more
/// than the second of readiness after which the gateway restarts a killed
/// server at once rather than with a growing pause.
const MIN_AGE: Duration = Duration::from_secs(2);
/// How long an edit may take to show: `extra`'s process started after
/// it was added, or ended after it was removed.
const EDIT_TIMEOUT: Duration = Duration::from_secs(20);
/// The payload string of a quick call.
const PAYLOAD: usize = 64;
/// Failures printed in full; the rest are counted.
const SHOWN: usize = 10;

/// The shape and length of one run.
#[derive(Debug, clap::Args)]
pub struct SoakArgs {
    /// How long the load runs, in seconds.
    #[arg(long, default_value_t = 300.0)]
    seconds: f64,
    /// Seconds of load before the gateway's memory is read the first time.
    #[arg(long, default_value_t = 30.0)]
    warmup: f64,
    /// Clients, each with a loop of quick calls and one of slow calls.
    #[arg(long, default_value_t = 24)]
    sessions: usize,
    /// How many of the clients speak 2026-07-28 (no session; the others
    /// open one, at 2025-06-18).
    #[arg(long, default_value_t = 6)]
    stateless: usize,
    /// Servers that stay configured (`s1`, `s2`, ...).
    #[arg(long, default_value_t = 3)]
    servers: usize,
    /// Seconds between SIGKILLs of a server's process (each server in
    /// turn).
    #[arg(long, default_value_t = 2.0)]
    kill_every: f64,
    /// Seconds between config changes: an edit (`extra` added, or removed)
    /// with SIGHUP, then SIGHUP alone, in turn.
    #[arg(long, default_value_t = 5.0)]
    edit_every: f64,
    /// How long a slow call takes, in milliseconds.
    #[arg(long, default_value_t = 1500)]
    slow_ms: u64,
    /// The memory bound: VmRSS at the end at most VmRSS after the warm-up
    /// times this...
    #[arg(long, default_value_t = 1.5)]
    rss_factor: f64,
    /// ...plus this many MiB.
    #[arg(long, default_value_t = 8)]
    rss_slack_mib: u64,
    /// Write the figures as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    raw: Option<PathBuf>,
}

/// What a run saw.
#[derive(Debug, Default, Serialize)]
pub struct Figures {
    pub seconds: f64,
    pub sessions: usize,
    /// Of `sessions`, the 2026-07-28 clients.
    pub stateless: usize,
    pub servers: usize,
    /// Quick calls of the servers that stay, answered with their echo.
    pub quick_calls: u64,
    pub quick_p50_ms: f64,
    pub quick_p99_ms: f64,
    pub quick_max_ms: f64,
    /// Slow calls answered with their tag.
    pub slow_calls: u64,
    pub slow_max_ms: f64,
    /// Calls answered with `-32010`, each at a kill of its server.
    pub lost_quick: u64,
    pub lost_slow: u64,
    /// Calls of `extra`, by outcome.
    pub extra_ok: u64,
    pub extra_unknown: u64,
    pub extra_lost: u64,
    pub extra_not_started: u64,
    /// Every error answer, by code (the servers that stay and `extra`).
    pub errors_by_code: BTreeMap<i64, u64>,
    pub kills: u64,
    /// Kill turns that found no process old enough.
    pub kills_skipped: u64,
    /// Config file edits (`extra` added or removed), each with a SIGHUP.
    pub edits: u64,
    pub sighups: u64,
    /// Answers that broke a rule (wrong payload, unexplained error, lost
    /// session, ...), and rules broken otherwise.
    pub failures: u64,
    pub sessions_alive: usize,
    pub rss_start_kib: u64,
    pub rss_end_kib: u64,
    pub rss_max_kib: u64,
    pub rss_bound_kib: u64,
    /// SIGTERM to the gateway's exit; `None` when it had to be killed.
    pub stop_ms: Option<f64>,
    pub exit: String,
    /// Processes of this run's servers still there after the gateway ended.
    pub left_over: usize,
}

pub async fn run(bins: &Binaries, args: &SoakArgs) -> anyhow::Result<()> {
    ensure!(args.servers > 0, "--servers must be at least 1");
    ensure!(args.sessions > 0, "--sessions must be at least 1");
    ensure!(
        args.stateless <= args.sessions,
        "--stateless must be at most --sessions"
    );
    ensure!(
        args.kill_every > 0.0 && args.edit_every > 0.0,
        "--kill-every and --edit-every must be more than 0"
    );
    ensure!(
        args.warmup < args.seconds,
        "--warmup must be shorter than --seconds"
    );
    let names: Vec<String> = (1..=args.servers).map(|i| format!("s{i}")).collect();
    let steady: Vec<Server> = names.iter().map(|n| Server::eager(n)).collect();
    let config = Gateway::new(bins, "soak", &steady)?;
    let front = Front::serve(bins, &config, &[]).await?;
    progress(format_args!(
        "soak: {} sessions ({} of 2026-07-28), {} servers for {} s; a kill every {} s, a config change every {} s",
        args.sessions, args.stateless, args.servers, args.seconds, args.kill_every, args.edit_every
    ));
    let rig = Rig {
        bins,
        args,
        config: &config,
        names: &names,
        steady: &steady,
        gateway: front.pid,
        epoch: Instant::now(),
        log: Log::default(),
    };
    let outcome = rig.soak(&front).await;
    let stopping = Instant::now();
    let status = front.stop().await;
    let stop_ms = status.map(|_| stopping.elapsed().as_secs_f64() * 1e3);
    let mark = gateway::server_mark("");
    let left: Vec<u32> = machine::processes_with_env(gateway::SERVER_MARK)
        .into_iter()
        .filter(|(_, v)| v.starts_with(&mark))
        .map(|(pid, _)| pid)
        .collect();
    let mut figures = outcome?;
    figures.stop_ms = stop_ms;
    figures.exit = status.map_or_else(|| "killed after the timeout".to_owned(), |s| s.to_string());
    figures.left_over = left.len();
    print!("{}", summary(&figures));
    if let Some(path) = &args.raw {
        std::fs::write(path, serde_json::to_string_pretty(&figures)?)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    ensure!(
        figures.failures == 0,
        "{} failures (the first are above)",
        figures.failures
    );
    ensure!(
        figures.sessions_alive == figures.sessions,
        "{} of {} sessions still worked at the end",
        figures.sessions_alive,
        figures.sessions
    );
    ensure!(
        figures.rss_end_kib <= figures.rss_bound_kib,
        "the gateway's VmRSS grew from {} KiB after the warm-up to {} KiB, over the bound of {} KiB",
        figures.rss_start_kib,
        figures.rss_end_kib,
        figures.rss_bound_kib
    );
    ensure!(
        stop_ms.is_some(),
        "the gateway did not end within the stop timeout after SIGTERM"
    );
    ensure!(
        left.is_empty(),
        "processes of the gateway's servers were left after it ended: {left:?}"
    );
    ensure!(figures.kills > 0, "no server was killed");
    ensure!(figures.edits > 0, "the config was never edited");
    Ok(())
}

fn summary(f: &Figures) -> String {
    let codes: Vec<String> = f
        .errors_by_code
        .iter()
        .map(|(code, n)| format!("{code} x{n}"))
        .collect();
    format!(
        "soak over {:.0} s, {} sessions ({} of 2026-07-28), {} servers: \
         {} quick calls answered (p50 {:.1} ms, p99 {:.1} ms, max {:.0} ms), {} slow calls answered (max {:.0} ms); \
         {} kills ({} turns skipped), {} config edits, {} SIGHUPs; \
         lost at a kill: {} quick and {} slow calls; \
         extra: {} answered, {} unknown tool, {} lost at its removal, {} not started; \
         errors by code: {}; {} failures; {} of {} sessions alive at the end; \
         VmRSS {} KiB after the warm-up, {} KiB at the end (bound {} KiB), {} KiB at most; \
         stopped {} ({}); {} processes left\n",
        f.seconds,
        f.sessions,
        f.stateless,
        f.servers,
        f.quick_calls,
        f.quick_p50_ms,
        f.quick_p99_ms,
        f.quick_max_ms,
        f.slow_calls,
        f.slow_max_ms,
        f.kills,
        f.kills_skipped,
        f.edits,
        f.sighups,
        f.lost_quick,
        f.lost_slow,
        f.extra_ok,
        f.extra_unknown,
        f.extra_lost,
        f.extra_not_started,
        if codes.is_empty() {
            "none".to_owned()
        } else {
            codes.join(", ")
        },
        f.failures,
        f.sessions_alive,
        f.sessions,
        f.rss_start_kib,
        f.rss_end_kib,
        f.rss_bound_kib,
        f.rss_max_kib,
        f.stop_ms
            .map_or_else(|| "never".to_owned(), |ms| format!("in {ms:.0} ms")),
        f.exit,
        f.left_over,
    )
}

/// Whom a call was for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    /// A server that stays configured, by index.
    Server(usize),
    Extra,
}

/// A call answered with an error: judged once the run is over, against
/// the kills and edits.
#[derive(Debug)]
struct ErrorAnswer {
    target: Target,
    slow: bool,
    sent: Instant,
    answered: Instant,
    error: Value,
}

/// What happened, as it happened.
#[derive(Debug, Default)]
struct Log {
    /// Server index and the moment just before its SIGKILL.
    kills: Mutex<Vec<(usize, Instant)>>,
    /// Each time `extra` was configured: from when its process was seen
    /// running to the SIGHUP that removed it (`None`: to the end).
    extra_present: Mutex<Vec<(Instant, Option<Instant>)>>,
    /// Each removal of `extra`: the moment just before its SIGHUP, and when
    /// its process was seen ended (`None`: never). The gateway applies it
    /// in between, when it gets to the signal.
    removals: Mutex<Vec<(Instant, Option<Instant>)>>,
    errors: Mutex<Vec<ErrorAnswer>>,
    failures: Mutex<Vec<String>>,
}

impl Log {
    fn fail(&self, what: String) {
        let mut failures = self.failures.lock().expect("log");
        if failures.len() < SHOWN {
            progress(format_args!("soak: FAILED: {what}"));
        }
        failures.push(what);
    }
}

/// Everything one run shares.
struct Rig<'a> {
    bins: &'a Binaries,
    args: &'a SoakArgs,
    config: &'a Gateway,
    names: &'a [String],
    steady: &'a [Server],
    gateway: u32,
    /// When the rig was made, for times in failure messages.
    epoch: Instant,
    log: Log,
}

/// What the loops of one session counted.
#[derive(Debug, Default)]
struct Counts {
    quick: Latencies,
    slow: Latencies,
    extra_ok: u64,
}

impl Rig<'_> {
    async fn soak(&self, front: &Front) -> anyhow::Result<Figures> {
        let args = self.args;
        let client = Client::new(args.sessions * 2 + 4)?;
        let mut sessions = Vec::with_capacity(args.sessions);
        for n in 0..args.sessions {
            sessions.push(if n < args.sessions - args.stateless {
                client.open(&front.url).await?
            } else {
                client.stateless(&front.url)
            });
        }
        let started = Instant::now();
        let until = started + Duration::from_secs_f64(args.seconds);
        let loads = sessions
            .iter()
            .enumerate()
            .map(|(n, session)| self.session_load(session, n, until));
        let (counts, (kills, skipped), (edits, sighups), rss) = tokio::join!(
            join_all(loads.collect()),
            self.killer(until),
            self.editor(until),
            self.sampler(started, until),
        );
        let (rss_start_kib, rss_end_kib, rss_max_kib) = rss?;
        let mut figures = Figures {
            seconds: started.elapsed().as_secs_f64(),
            sessions: args.sessions,
            stateless: args.stateless,
            servers: args.servers,
            kills,
            kills_skipped: skipped,
            edits,
            sighups,
            rss_start_kib,
            rss_end_kib,
            rss_max_kib,
            rss_bound_kib: (rss_start_kib as f64 * args.rss_factor) as u64
                + args.rss_slack_mib * 1024,
            ..Figures::default()
        };
        let mut quick = Latencies::default();
        let mut slow = Latencies::default();
        for c in &counts {
            quick.extend(&c.quick);
            slow.extend(&c.slow);
            figures.extra_ok += c.extra_ok;
        }
        figures.quick_calls = quick.len() as u64;
        figures.quick_p50_ms = quick.quantile_us(0.5) / 1e3;
        figures.quick_p99_ms = quick.quantile_us(0.99) / 1e3;
        figures.quick_max_ms = quick.quantile_us(1.0) / 1e3;
        figures.slow_calls = slow.len() as u64;
        figures.slow_max_ms = slow.quantile_us(1.0) / 1e3;
        self.judge(&mut figures);
        // The churn is over: every session calls every server once more.
        let last = sessions
            .iter()
            .enumerate()
            .map(|(n, session)| self.still_works(session, n));
        figures.sessions_alive = join_all(last.collect())
            .await
            .into_iter()
            .filter(|ok| *ok)
            .count();
        figures.failures = self.log.failures.lock().expect("log").len() as u64;
        Ok(figures)
    }

    /// One session's two loops until `until`.
    async fn session_load(&self, session: &Session, n: usize, until: Instant) -> Counts {
        let (quick, slow) = tokio::join!(
            self.quick_loop(session, n, until),
            self.slow_loop(session, n, until)
        );
        Counts {
            quick: quick.0,
            slow,
            extra_ok: quick.1,
        }
    }

    /// Quick calls of each server in turn, `extra` among them.
    async fn quick_loop(&self, session: &Session, n: usize, until: Instant) -> (Latencies, u64) {
        let targets: Vec<(Target, Payloads)> = self
            .names
            .iter()
            .enumerate()
            .map(|(i, name)| (Target::Server(i), name.as_str()))
            .chain(std::iter::once((Target::Extra, EXTRA)))
            .map(|(t, name)| {
                let tool = format!("{name}__echo");
                (t, Payloads::with(PAYLOAD, Echo::Tool(vec![tool])))
            })
            .collect();
        let mut latencies = Latencies::default();
        let mut extra_ok = 0;
        let mut scratch = Scratch::default();
        let mut id = (n as u64) << 40;
        while Instant::now() < until {
            id += 1;
            let (target, payloads) = &targets[(id % targets.len() as u64) as usize];
            let body = payloads.request(id, &mut scratch).concat();
            let sent = Instant::now();
            let answer = session.request(body).await;
            let check = |a: &Value| check_echo(payloads, a);
            if self.answered(*target, false, id, sent, answer, check) {
                match target {
                    Target::Server(_) => latencies.push(sent.elapsed()),
                    Target::Extra => extra_ok += 1,
                }
            }
        }
        (latencies, extra_ok)
    }

    /// Slow calls of a server picked at random each time (never `extra`).
    async fn slow_loop(&self, session: &Session, n: usize, until: Instant) -> Latencies {
        let mut latencies = Latencies::default();
        let ms = self.args.slow_ms;
        let mut id = ((n as u64) << 40) | (1 << 36);
        while Instant::now() < until {
            id += 1;
            let i = (mix(id) % self.names.len() as u64) as usize;
            let tag = format!("{id:016x}");
            let body = format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{}__sleep","arguments":{{"ms":{ms},"tag":"{tag}"}}}}}}"#,
                self.names[i]
            );
            let expected = format!("slept {ms} ms: {tag}");
            let sent = Instant::now();
            let answer = session.request(body.into_bytes()).await;
            let check = |a: &Value| {
                let text = a["result"]["content"][0]["text"].as_str();
                ensure!(
                    text == Some(expected.as_str()),
                    "slow call {id} was answered with another text: {}",
                    snippet_of(a)
                );
                Ok(())
            };
            if self.answered(Target::Server(i), true, id, sent, answer, check) {
                latencies.push(sent.elapsed());
            }
        }
        latencies
    }

    /// Files one answer: `true` for a result that passed `check`; an error
    /// answer is kept to be judged at the end; anything else is a failure.
    fn answered(
        &self,
        target: Target,
        slow: bool,
        id: u64,
        sent: Instant,
        answer: anyhow::Result<Value>,
        check: impl FnOnce(&Value) -> anyhow::Result<()>,
    ) -> bool {
        let answered = Instant::now();
        let answer = match answer {
            Ok(a) => a,
            Err(e) => {
                self.log.fail(format!("call {id} ({target:?}): {e:#}"));
                return false;
            }
        };
        if answer["id"].as_u64() != Some(id) {
            self.log.fail(format!(
                "call {id} was answered with another id: {}",
                snippet_of(&answer)
            ));
            return false;
        }
        if let Some(error) = answer.get("error") {
            self.log.errors.lock().expect("log").push(ErrorAnswer {
                target,
                slow,
                sent,
                answered,
                error: error.clone(),
            });
            return false;
        }
        match check(&answer) {
            Ok(()) => true,
            Err(e) => {
                self.log.fail(format!("{e:#}"));
                false
            }
        }
    }

    /// Judges every error answer against the kills and edits.
    fn judge(&self, figures: &mut Figures) {
        let kills = self.log.kills.lock().expect("log");
        let present = self.log.extra_present.lock().expect("log");
        let removals = self.log.removals.lock().expect("log");
        let errors = std::mem::take(&mut *self.log.errors.lock().expect("log"));
        let end = Instant::now();
        for e in errors {
            let code = e.error["code"].as_i64().unwrap_or_default();
            *figures.errors_by_code.entry(code).or_default() += 1;
            let within = |t: &Instant| e.sent <= *t && *t <= e.answered;
            let explained = match (e.target, code) {
                (Target::Server(i), WORKER_LOST) => {
                    // Lost to a SIGKILL (the exit it reports) of this
                    // server while the call was out.
                    let at_kill = e.error["data"]["exit"]["signal"] == 9
                        && kills.iter().any(|(k, t)| *k == i && within(t));
                    if at_kill {
                        if e.slow {
                            figures.lost_slow += 1;
                        } else {
                            figures.lost_quick += 1;
                        }
                    }
                    at_kill
                }
                (Target::Extra, INVALID_PARAMS) => {
                    let listed = present
                        .iter()
                        .any(|(from, to)| *from <= e.sent && e.answered <= to.unwrap_or(end));
                    let unknown = e.error["message"]
                        .as_str()
                        .is_some_and(|m| m.starts_with("Unknown tool"));
                    figures.extra_unknown += 1;
                    unknown && !listed
                }
                (Target::Extra, WORKER_LOST | NOT_STARTED) => {
                    if code == WORKER_LOST {
                        figures.extra_lost += 1;
                    } else {
                        figures.extra_not_started += 1;
                    }
                    let reason = e.error["data"]["reason"].as_str().unwrap_or_default();
                    // Answered after the SIGHUP, sent before the removal
                    // was done with.
                    let across = removals
                        .iter()
                        .any(|(hup, gone)| *hup <= e.answered && e.sent <= gone.unwrap_or(end));
                    reason.contains("removed from the configuration") && across
                }
                _ => false,
            };
            if !explained {
                self.log.fail(format!(
                    "a {} call of {:?} got an error no kill or edit explains \
                     (sent {:.1?} into the run, answered {:.1?} later): {}",
                    if e.slow { "slow" } else { "quick" },
                    e.target,
                    e.sent.duration_since(self.epoch),
                    e.answered.duration_since(e.sent),
                    e.error
                ));
            }
        }
    }

    /// One more call of every server on `session`, all answered.
    async fn still_works(&self, session: &Session, n: usize) -> bool {
        let mut ok = true;
        for (i, name) in self.names.iter().enumerate() {
            let payloads = Payloads::with(PAYLOAD, Echo::Tool(vec![format!("{name}__echo")]));
            let id = ((n as u64) << 40) | (2 << 36) | i as u64;
            let body = payloads.request(id, &mut Scratch::default()).concat();
            let result = session
                .request(body)
                .await
                .and_then(|a| check_echo(&payloads, &a));
            if let Err(e) = result {
                self.log.fail(format!(
                    "session {n} no longer works: its last call of {name}: {e:#}"
                ));
                ok = false;
            }
        }
        ok
    }

    /// SIGKILLs one server's process every `--kill-every`, each server in
    /// turn, until `until`; checks on the way that no server was restarted
    /// but by a kill. Returns the kills and the turns skipped.
    async fn killer(&self, until: Instant) -> (u64, u64) {
        let every = Duration::from_secs_f64(self.args.kill_every);
        // Per server: its process and when it was first seen.
        let mut seen: HashMap<usize, (u32, Instant)> = HashMap::new();
        let mut killed: HashMap<usize, u32> = HashMap::new();
        let (mut kills, mut skipped, mut turn) = (0, 0, 0);
        let mut next = Instant::now() + every;
        while next < until {
            tokio::time::sleep_until(next).await;
            next += every;
            let now = Instant::now();
            let mut fresh = HashMap::new();
            for (i, pid) in self.processes() {
                let first = match seen.get(&i) {
                    Some(&(old, at)) if old == pid => at,
                    Some(&(old, _)) => {
                        if killed.get(&i) != Some(&old) {
                            self.log.fail(format!(
                                "server {} was restarted without a kill (pid {old}, then {pid})",
                                self.names[i]
                            ));
                        }
                        now
                    }
                    None => now,
                };
                fresh.insert(i, (pid, first));
            }
            seen = fresh;
            let n = self.names.len();
            let pick = (0..n)
                .map(|k| (turn + k) % n)
                .find(|i| seen.get(i).is_some_and(|(_, at)| now - *at >= MIN_AGE));
            let Some(i) = pick else {
                skipped += 1;
                continue;
            };
            let pid = seen[&i].0;
            let at = Instant::now();
            if kill(Pid::from_raw(pid as i32), Signal::SIGKILL).is_ok() {
                self.log.kills.lock().expect("log").push((i, at));
                killed.insert(i, pid);
                kills += 1;
            }
            turn = i + 1;
        }
        (kills, skipped)
    }

    /// The processes of the servers that stay, with their index, among the
    /// gateway's children.
    fn processes(&self) -> Vec<(usize, u32)> {
        let marks: Vec<String> = self.names.iter().map(|n| gateway::server_mark(n)).collect();
        machine::children(self.gateway)
            .into_iter()
            .filter_map(|pid| {
                let mark = machine::env_var(pid, gateway::SERVER_MARK)?;
                Some((marks.iter().position(|m| *m == mark)?, pid))
            })
            .collect()
    }

    /// Whether `extra`'s process runs under the gateway.
    fn extra_runs(&self) -> bool {
        let mark = gateway::server_mark(EXTRA);
        machine::children(self.gateway)
            .into_iter()
            .any(|pid| machine::env_var(pid, gateway::SERVER_MARK).as_deref() == Some(&mark))
    }

    /// Every `--edit-every` until `until`, in turn: `extra` added or
    /// removed, then SIGHUP; SIGHUP alone. Returns the edits and SIGHUPs.
    async fn editor(&self, until: Instant) -> (u64, u64) {
        let every = Duration::from_secs_f64(self.args.edit_every);
        let (mut edits, mut sighups) = (0, 0);
        let mut with_extra = false;
        let mut next = Instant::now() + every;
        let mut step = 0u64;
        while next < until {
            tokio::time::sleep_until(next).await;
            next += every;
            step += 1;
            if step % 2 == 0 {
                if self.hangup() {
                    sighups += 1;
                }
                continue;
            }
            with_extra = !with_extra;
            let mut servers = self.steady.to_vec();
            if with_extra {
                servers.push(Server::eager(EXTRA));
            }
            if let Err(e) = self.config.rewrite(self.bins, &servers) {
                self.log.fail(format!("cannot edit the config: {e:#}"));
                continue;
            }
            edits += 1;
            let at = Instant::now();
            if !self.hangup() {
                continue;
            }
            sighups += 1;
            if !with_extra {
                self.log.removals.lock().expect("log").push((at, None));
                if let Some(last) = self.log.extra_present.lock().expect("log").last_mut() {
                    last.1.get_or_insert(at);
                }
            }
            // The edit shows: `extra` runs, or no longer does.
            let deadline = at + EDIT_TIMEOUT;
            loop {
                if self.extra_runs() == with_extra {
                    let seen = Instant::now();
                    if with_extra {
                        self.log
                            .extra_present
                            .lock()
                            .expect("log")
                            .push((seen, None));
                    } else if let Some(last) = self.log.removals.lock().expect("log").last_mut() {
                        last.1 = Some(seen);
                    }
                    break;
                }
                if Instant::now() >= deadline {
                    self.log.fail(format!(
                        "`{EXTRA}` was {} the config, but after {EDIT_TIMEOUT:?} its process {}",
                        if with_extra {
                            "added to"
                        } else {
                            "removed from"
                        },
                        if with_extra {
                            "had not started"
                        } else {
                            "still ran"
                        },
                    ));
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        (edits, sighups)
    }

    /// SIGHUP to the gateway; `false` (and a failure) if it cannot be sent.
    fn hangup(&self) -> bool {
        match kill(Pid::from_raw(self.gateway as i32), Signal::SIGHUP) {
            Ok(()) => true,
            Err(e) => {
                self.log
                    .fail(format!("cannot send SIGHUP to the gateway: {e}"));
                false
            }
        }
    }

    /// The gateway's VmRSS every second until `until`: the first reading
    /// past the warm-up, the last one, and the most.
    async fn sampler(&self, started: Instant, until: Instant) -> anyhow::Result<(u64, u64, u64)> {
        let warm = started + Duration::from_secs_f64(self.args.warmup);
        let (mut first, mut last, mut most) = (None, 0, 0);
        let mut next = started;
        loop {
            let now = Instant::now();
            if now >= until {
                break;
            }
            let kib = machine::rss_kib(self.gateway).context("the gateway is gone")?;
            most = most.max(kib);
            if now >= warm {
                first.get_or_insert(kib);
                last = kib;
            }
            next += Duration::from_secs(1);
            tokio::time::sleep_until(next.min(until)).await;
        }
        let first = first.context("no memory reading after the warm-up")?;
        Ok((first, last, most))
    }
}

/// SplitMix64's finalizer: `x` scrambled, so that consecutive ids pick
/// servers with no pattern.
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slow_calls_spread_over_the_servers() {
        let mut counts = [0u32; 3];
        for id in (1u64 << 36)..(1u64 << 36) + 3000 {
            counts[(mix(id) % 3) as usize] += 1;
        }
        assert!(
            counts.iter().all(|&c| (800..1200).contains(&c)),
            "{counts:?}"
        );
    }
}
