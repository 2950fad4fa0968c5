//! Draining a worker's stderr.
//!
//! A worker's stderr must always be read, or a chatty worker blocks on a full
//! pipe. Each line is passed through to our own stderr (as if the worker ran
//! unsupervised) or discarded, and handed to an observer, which keeps the
//! crash-report tail and looks for authorization prompts. Lines are cut at
//! [`MAX_LINE`] so a worker that never writes a newline costs bounded memory.

use std::borrow::Cow;

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWriteExt, BufReader};

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
    let mut out = tokio::io::stderr();
    let mut line = Vec::with_capacity(256);
    loop {
        line.clear();
        match read_line_bounded(&mut reader, &mut line).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        if mode == Passthrough::Inherit {
            let line = rewrite(&line);
            // One write per line keeps worker lines whole among our own logs.
            if prefix.is_empty() {
                let _ = out.write_all(&line).await;
                if line.last() != Some(&b'\n') {
                    let _ = out.write_all(b"\n").await;
                }
            } else {
                let mut whole = Vec::with_capacity(prefix.len() + line.len() + 1);
                whole.extend_from_slice(prefix.as_bytes());
                whole.extend_from_slice(&line);
                if line.last() != Some(&b'\n') {
                    whole.push(b'\n');
                }
                let _ = out.write_all(&whole).await;
            }
        }
        let text = String::from_utf8_lossy(&line);
        observe(text.trim_end_matches(['\n', '\r']));
    }
    let _ = out.flush().await;
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
