//! Draining a worker's stderr.
//!
//! A worker's stderr must always be read, or a chatty worker blocks on a full
//! pipe. Each line is passed through to our own stderr (as if the worker ran
//! unsupervised) or discarded, and handed to an observer, which keeps the
//! crash-report tail and looks for authorization prompts. Lines are cut at
//! [`MAX_LINE`] so a worker that never writes a newline costs bounded memory.

use std::borrow::Cow;
use std::io::Write as _;
use std::sync::OnceLock;

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::sync::{mpsc, oneshot};

/// The longest stderr line kept whole; the rest of a longer line is dropped.
pub const MAX_LINE: usize = 8 * 1024;

/// Where a worker's stderr goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Passthrough {
    /// Copied to mcpvisor's stderr.
    #[default]
    Inherit,
    /// Read and dropped.
    Discard,
}

/// Reads `stderr` to its end. `observe` sees each line without its
/// terminator, lossily decoded.
pub async fn pump<R, F>(stderr: R, mode: Passthrough, observe: F)
where
    R: AsyncRead + Unpin,
    F: FnMut(&str),
{
    pump_prefixed(stderr, mode, "", as_is, observe).await;
}

/// The rewrite that changes nothing.
fn as_is(line: &[u8]) -> Cow<'_, [u8]> {
    Cow::Borrowed(line)
}

/// [`pump`], with each line passed through rewritten by `rewrite` (which
/// takes out what must not be shown), and `prefix` written before it (the
/// server's name, where several servers share one stderr). `observe` sees
/// the line as the worker wrote it, without the prefix.
pub async fn pump_prefixed<R, W, F>(
    stderr: R,
    mode: Passthrough,
    prefix: &str,
    rewrite: W,
    mut observe: F,
) where
    R: AsyncRead + Unpin,
    W: for<'a> Fn(&'a [u8]) -> Cow<'a, [u8]>,
    F: FnMut(&str),
{
    let mut reader = BufReader::with_capacity(MAX_LINE, stderr);
    let out = (mode == Passthrough::Inherit).then(stderr_writer);
    let mut line = Vec::with_capacity(256);
    loop {
        line.clear();
        match read_line_bounded(&mut reader, &mut line).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        if let Some(out) = out {
            let line = rewrite(&line);
            // One write per line keeps worker lines whole among our own logs.
            let mut whole = Vec::with_capacity(prefix.len() + line.len() + 1);
            whole.extend_from_slice(prefix.as_bytes());
            whole.extend_from_slice(&line);
            if line.last() != Some(&b'\n') {
                whole.push(b'\n');
            }
            // Waits while the writer is behind (a full stderr), as a
            // write would; a writer that is gone drops the line.
            let _ = out.send(ToStderr::Line(whole)).await;
        }
        let text = String::from_utf8_lossy(&line);
        observe(text.trim_end_matches(['\n', '\r']));
    }
    // What this worker wrote is out before the pump ends.
    if let Some(out) = out {
        let (done, written) = oneshot::channel();
        if out.send(ToStderr::Flush(done)).await.is_ok() {
            let _ = written.await;
        }
    }
}

/// A message for the stderr writer.
enum ToStderr {
    /// A whole line, written in one write.
    Line(Vec<u8>),
    /// Answered once every line sent before it is written.
    Flush(oneshot::Sender<()>),
}

/// Lines that may wait for the stderr writer; a pump waits while it has
/// this many queued.
const STDERR_QUEUE: usize = 256;

/// The one writer of every worker's passed-through lines, for the whole
/// process: a thread of its own, so that a write to an stderr nobody reads
/// blocks neither the runtime nor a pump's task (the pump waits on the
/// queue instead), and one thread for all workers. tokio's `Stderr` takes
/// a blocking-pool thread for each handle writing at once: twenty servers
/// starting together left twenty threads behind, each with its memory.
/// If the thread cannot be started, the queue is closed and lines are
/// dropped, as failed writes were.
fn stderr_writer() -> &'static mpsc::Sender<ToStderr> {
    static WRITER: OnceLock<mpsc::Sender<ToStderr>> = OnceLock::new();
    WRITER.get_or_init(|| {
        let (tx, mut rx) = mpsc::channel(STDERR_QUEUE);
        let started = std::thread::Builder::new()
            .name("mcpvisor-stderr".into())
            .spawn(move || {
                while let Some(message) = rx.blocking_recv() {
                    match message {
                        ToStderr::Line(line) => {
                            let _ = std::io::stderr().lock().write_all(&line);
                        }
                        ToStderr::Flush(done) => {
                            let _ = done.send(());
                        }
                    }
                }
            });
        if let Err(e) = started {
            tracing::warn!(error = %e, "no thread for the servers' stderr; their lines are dropped");
        }
        tx
    })
}

/// Reads one line into `line`, keeping at most [`MAX_LINE`] bytes of it.
/// Returns the number of bytes consumed (0 at end of stream).
async fn read_line_bounded<R: AsyncRead + Unpin>(
    reader: &mut BufReader<R>,
    line: &mut Vec<u8>,
) -> std::io::Result<usize> {
    let mut consumed = 0;
    loop {
        let buf = reader.fill_buf().await?;
        if buf.is_empty() {
            return Ok(consumed);
        }
        let (take, done) = match memchr_newline(buf) {
            Some(i) => (i + 1, true),
            None => (buf.len(), false),
        };
        let room = MAX_LINE.saturating_sub(line.len());
        line.extend_from_slice(&buf[..take.min(room)]);
        reader.consume(take);
        consumed += take;
        if done {
            return Ok(consumed);
        }
    }
}

fn memchr_newline(buf: &[u8]) -> Option<usize> {
    buf.iter().position(|&b| b == b'\n')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn observes_lines_and_bounds_long_ones() {
        let mut input = b"first\r\nsecond\n".to_vec();
        input.extend(std::iter::repeat_n(b'x', MAX_LINE * 3));
        input.extend_from_slice(b"\nlast");
        let mut seen = Vec::new();
        pump(&input[..], Passthrough::Discard, |l| {
            seen.push(l.to_owned())
        })
        .await;
        assert_eq!(seen[0], "first");
        assert_eq!(seen[1], "second");
        assert_eq!(seen[2].len(), MAX_LINE);
        assert_eq!(seen[3], "last");
        assert_eq!(seen.len(), 4);
    }
}
