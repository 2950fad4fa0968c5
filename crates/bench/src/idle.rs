//! `mcpvisor-bench idle`: what an idle gateway costs.
//!
//! `mcpvisor serve --http 127.0.0.1:0` with `--servers` fake workers, all
//! eager, and one client session open; once every server is ready and the
//! session has made one call, nothing is sent for `--seconds`. Over that
//! window the gateway's CPU time (utime + stime of `/proc/PID/stat`, in
//! clock ticks) and its wake-ups (the voluntary context switches of every
//! thread, `/proc/PID/task/*/status`: each is a sleep that ended) are
//! counted; the servers' own are not. An idle gateway should wake only
//! for its own timers, a few times a second at most in all.

use std::time::Duration;

use anyhow::{Context as _, ensure};
use serde::Serialize;
use tokio::time::Instant;

use crate::gateway::{self, Gateway, Server};
use crate::http::{Client, Front, check_echo};
use crate::payload::{Echo, Payloads, Scratch};
use crate::peer::Binaries;
use crate::scenario::progress;

/// The sizes of one run.
#[derive(Debug, clap::Args)]
pub struct IdleArgs {
    /// Servers behind the gateway.
    #[arg(long, default_value_t = 20)]
    servers: usize,
    /// The idle window, in seconds.
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    /// Fail if the gateway wakes more often than this per second.
    #[arg(long, value_name = "N")]
    max_wakeups_per_sec: Option<f64>,
}

/// What the idle window cost.
#[derive(Debug, Serialize)]
pub struct Figures {
    pub servers: usize,
    pub seconds: f64,
    pub cpu_ticks: u64,
    pub wakeups: u64,
    pub wakeups_per_sec: f64,
    pub involuntary: u64,
    pub threads: usize,
}

pub async fn run(bins: &Binaries, args: &IdleArgs) -> anyhow::Result<()> {
    let servers: Vec<Server> = (0..args.servers)
        .map(|n| Server::eager(&format!("{}{n}", gateway::SERVER)))
        .collect();
    let config = Gateway::new(bins, "idle", &servers)?;
    let front = Front::serve(bins, &config, &[]).await?;
    let outcome = measure(&front, args).await;
    front.stop().await;
    let figures = outcome?;
    println!(
        "{} servers idle for {:.0} s: {} ticks of CPU, {} wake-ups ({:.2} a second) over {} threads, {} involuntary switches",
        figures.servers,
        figures.seconds,
        figures.cpu_ticks,
        figures.wakeups,
        figures.wakeups_per_sec,
        figures.threads,
        figures.involuntary
    );
    if let Some(max) = args.max_wakeups_per_sec {
        ensure!(
            figures.wakeups_per_sec <= max,
            "the idle gateway woke {:.2} times a second, more than {max}",
            figures.wakeups_per_sec
        );
    }
    Ok(())
}

async fn measure(front: &Front, args: &IdleArgs) -> anyhow::Result<Figures> {
    // Ready: every server started (`/readyz`), and a call through one.
    let http = reqwest::Client::new();
    let ready = front.url.replace("/mcp", "/readyz");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let status = http.get(&ready).send().await.map(|r| r.status().as_u16());
        if status.is_ok_and(|s| s == 200) {
            break;
        }
        ensure!(
            Instant::now() < deadline,
            "the gateway was not ready within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let client = Client::new(1)?;
    let session = client.open(&front.url).await?;
    let tool = format!("{}0__echo", gateway::SERVER);
    let payloads = Payloads::with(64, Echo::Tool(vec![tool]));
    let answer = session
        .request(payloads.request(1, &mut Scratch::default()).concat())
        .await?;
    check_echo(&payloads, &answer)?;
    // What the start and the call set going has settled.
    tokio::time::sleep(Duration::from_secs(2)).await;
    progress(format_args!(
        "{} servers idle for {} s",
        args.servers, args.seconds
    ));
    // Threads are read every 100 ms, so that one that starts and ends
    // within the window (tokio's blocking pool) is counted too.
    let mut seen = Threads::default();
    let before = seen.sample(front.pid)?;
    let started = Instant::now();
    let until = started + Duration::from_secs(args.seconds);
    while Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(100)).await;
        seen.sample(front.pid)?;
    }
    let after = seen.sample(front.pid)?;
    let seconds = started.elapsed().as_secs_f64();
    session.close().await;
    let (wakeups, involuntary) = seen.switches();
    Ok(Figures {
        servers: args.servers,
        seconds,
        cpu_ticks: after.saturating_sub(before),
        wakeups,
        wakeups_per_sec: wakeups as f64 / seconds,
        involuntary,
        threads: seen.tids.len(),
    })
}

/// Each thread's context switches when first and last seen.
#[derive(Debug, Default)]
struct Threads {
    tids: std::collections::HashMap<String, [(u64, u64); 2]>,
    first: bool,
}

impl Threads {
    /// Reads every thread of `pid`; the process's CPU ticks so far.
    fn sample(&mut self, pid: u32) -> anyhow::Result<u64> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .with_context(|| format!("reading /proc/{pid}/stat"))?;
        // utime and stime: the 14th and 15th fields, the 12th and 13th
        // after the command's closing parenthesis.
        let rest = stat
            .rsplit_once(')')
            .context("a stat line without a command")?
            .1;
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let tick = |i: usize| -> anyhow::Result<u64> {
            fields
                .get(i)
                .and_then(|f| f.parse().ok())
                .with_context(|| format!("field {i} of /proc/{pid}/stat"))
        };
        let ticks = tick(11)? + tick(12)?;
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))
            .with_context(|| format!("reading /proc/{pid}/task"))?;
        let later = self.first;
        self.first = true;
        for task in tasks.flatten() {
            let Ok(status) = std::fs::read_to_string(task.path().join("status")) else {
                continue;
            };
            let count = |prefix: &str| {
                status
                    .lines()
                    .find_map(|l| l.strip_prefix(prefix))
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .unwrap_or(0)
            };
            let now = (
                count("voluntary_ctxt_switches:"),
                count("nonvoluntary_ctxt_switches:"),
            );
            let tid = task.file_name().to_string_lossy().into_owned();
            // A thread born during the window counts from nothing.
            let start = if later { (0, 0) } else { now };
            self.tids.entry(tid).or_insert([start, now])[1] = now;
        }
        Ok(ticks)
    }

    /// Voluntary and involuntary switches over the window, every thread.
    fn switches(&self) -> (u64, u64) {
        self.tids.values().fold((0, 0), |(v, i), [first, last]| {
            (v + last.0 - first.0, i + last.1 - first.1)
        })
    }
}
