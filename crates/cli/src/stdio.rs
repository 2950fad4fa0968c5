//! The client's pipes, as non-blocking async I/O where the kernel allows.
//!
//! `tokio::io::stdin()` reads on a blocking thread, which costs a thread hop
//! per read and cannot be cancelled at shutdown. When stdin and stdout are
//! pipes (or the Unix sockets some clients use for stdio), they are
//! registered with the reactor instead. Anything else (a terminal, a file)
//! falls back to tokio's blocking adapters.

use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::FileTypeExt;
use std::pin::Pin;

use tokio::io::{AsyncRead, AsyncWrite};

pub type Reader = Pin<Box<dyn AsyncRead + Send>>;
pub type Writer = Pin<Box<dyn AsyncWrite + Send>>;

/// Must be called inside the runtime.
pub fn client_stdin() -> Reader {
    if let Some(fd) = dup(std::io::stdin().as_fd()) {
        let file = File::from(fd);
        match kind(&file) {
            Kind::Fifo => {
                if let Ok(rx) = tokio::net::unix::pipe::Receiver::from_file(file) {
                    return Box::pin(rx);
                }
            }
            Kind::Socket => {
                if let Ok(s) = socket(file) {
                    return Box::pin(s);
                }
            }
            Kind::Other => {}
        }
    }
    Box::pin(tokio::io::stdin())
}

/// Must be called inside the runtime.
pub fn client_stdout() -> Writer {
    if let Some(fd) = dup(std::io::stdout().as_fd()) {
        let file = File::from(fd);
        match kind(&file) {
            Kind::Fifo => {
                if let Ok(tx) = tokio::net::unix::pipe::Sender::from_file(file) {
                    return Box::pin(tx);
                }
            }
            Kind::Socket => {
                if let Ok(s) = socket(file) {
                    return Box::pin(s);
                }
            }
            Kind::Other => {}
        }
    }
    Box::pin(tokio::io::stdout())
}

enum Kind {
    Fifo,
    Socket,
    Other,
}

fn kind(file: &File) -> Kind {
    match file.metadata().map(|m| m.file_type()) {
        Ok(t) if t.is_fifo() => Kind::Fifo,
        Ok(t) if t.is_socket() => Kind::Socket,
        _ => Kind::Other,
    }
}

fn dup(fd: std::os::fd::BorrowedFd<'_>) -> Option<OwnedFd> {
    fd.try_clone_to_owned().ok()
}

fn socket(file: File) -> std::io::Result<tokio::net::UnixStream> {
    let std = std::os::unix::net::UnixStream::from(OwnedFd::from(file));
    std.set_nonblocking(true)?;
    tokio::net::UnixStream::from_std(std)
}
