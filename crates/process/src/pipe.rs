//! What a worker left unread in its stdin pipe.
//!
//! A message written to a worker's stdin has reached the worker only once
//! the worker has read it: one written a moment before the worker died, or
//! after its reader died while another process of its group (the shell or
//! launcher it runs under) still held the pipe open, lies in the pipe
//! unread. Once no process holds the pipe's read end any more, nothing will
//! ever read those bytes, and the kernel still says how many there are.

use std::os::fd::{AsFd, OwnedFd};

use rustix::event::{PollFd, PollFlags, Timespec, poll};

/// A second handle on the write end of a worker's stdin pipe, to ask how
/// many bytes written to it no process will ever read.
///
/// It holds the write end open: the worker sees the end of its stdin only
/// once this is dropped too, so drop it when the stdin it was made from is
/// closed.
#[derive(Debug)]
pub struct StdinProbe(OwnedFd);

impl StdinProbe {
    /// A probe on the pipe `stdin` writes to.
    pub fn new(stdin: &impl AsFd) -> std::io::Result<Self> {
        stdin.as_fd().try_clone_to_owned().map(Self)
    }

    /// The bytes written to the pipe that no process will read: `Some`
    /// only once the pipe has no reader left; `None` while some process
    /// still holds its read end (it may yet read them), or when the kernel
    /// does not say.
    pub fn unread(&self) -> Option<u64> {
        let mut fds = [PollFd::new(&self.0, PollFlags::OUT)];
        let now = Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        poll(&mut fds, Some(&now)).ok()?;
        // A pipe's write end polls as an error once it has no reader.
        if !fds[0].revents().contains(PollFlags::ERR) {
            return None;
        }
        rustix::io::ioctl_fionread(&self.0).ok()
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    #[test]
    fn unread_bytes_are_counted_only_once_no_reader_is_left() {
        let (reader, writer) = nix::unistd::pipe().expect("pipe");
        let mut writer = std::fs::File::from(writer);
        let probe = StdinProbe::new(&writer).expect("probe");
        writer.write_all(b"hello\nworld\n").expect("write");
        assert_eq!(probe.unread(), None, "a reader may still read them");
        let mut reader = std::fs::File::from(reader);
        let mut first = [0u8; 6];
        std::io::Read::read_exact(&mut reader, &mut first).expect("read");
        drop(reader);
        assert_eq!(probe.unread(), Some(6), "\"world\\n\" was never read");
    }

    #[test]
    fn a_pipe_read_to_the_end_has_nothing_unread() {
        let (reader, writer) = nix::unistd::pipe().expect("pipe");
        let mut writer = std::fs::File::from(writer);
        let probe = StdinProbe::new(&writer).expect("probe");
        writer.write_all(b"all of it\n").expect("write");
        let mut reader = std::fs::File::from(reader);
        let mut all = [0u8; 10];
        std::io::Read::read_exact(&mut reader, &mut all).expect("read");
        drop(reader);
        assert_eq!(probe.unread(), Some(0));
    }
}
