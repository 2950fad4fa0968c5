//! The client's pipes, as non-blocking async I/O where the kernel allows.
//!
//! `tokio::io::stdin()` reads on a blocking thread, which costs a thread hop
//! per read and cannot be cancelled at shutdown. When stdin and stdout are
//! pipes (or the Unix sockets some clients use for stdio), they are
//! registered with the reactor instead. Anything else (a terminal, a file)
//! falls back to tokio's blocking adapters.

use std::fs::File;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::FileTypeExt;
use std::pin::Pin;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::UnixStream;
use tokio::net::unix::pipe;

pub type Reader = Pin<Box<dyn AsyncRead + Send>>;
pub type Writer = Pin<Box<dyn AsyncWrite + Send>>;

/// A descriptor registered with the reactor: a pipe end or a socket.
enum Registered<P> {
    Pipe(P),
    Socket(UnixStream),
}

/// Must be called inside the runtime.
pub fn client_stdin() -> Reader {
    match register(std::io::stdin().as_fd(), pipe::Receiver::from_file) {
        Some(Registered::Pipe(rx)) => Box::pin(rx),
        Some(Registered::Socket(s)) => Box::pin(s),
        None => Box::pin(tokio::io::stdin()),
    }
}

/// Must be called inside the runtime.
pub fn client_stdout() -> Writer {
    match register(std::io::stdout().as_fd(), pipe::Sender::from_file) {
        Some(Registered::Pipe(tx)) => Box::pin(tx),
        Some(Registered::Socket(s)) => Box::pin(s),
        None => Box::pin(tokio::io::stdout()),
    }
}

/// Registers a duplicate of `fd` when it is a FIFO (with `pipe`) or a Unix
/// socket; `None` for anything else, or when registering fails.
fn register<P>(fd: BorrowedFd<'_>, pipe: fn(File) -> std::io::Result<P>) -> Option<Registered<P>> {
    let file = File::from(fd.try_clone_to_owned().ok()?);
    let kind = file.metadata().ok()?.file_type();
    if kind.is_fifo() {
        pipe(file).ok().map(Registered::Pipe)
    } else if kind.is_socket() {
        let std = std::os::unix::net::UnixStream::from(OwnedFd::from(file));
        std.set_nonblocking(true).ok()?;
        UnixStream::from_std(std).ok().map(Registered::Socket)
    } else {
        None
    }
}
