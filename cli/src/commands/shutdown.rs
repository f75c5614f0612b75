//! SIGTERM and SIGINT (and SIGHUP for the manager) for servers: the signal handler only writes to a
//! socket, and the serving loop polls it beside the listener, so shutdown
//! runs as ordinary code that drops what it owns.

use std::io;
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use signal_hook::consts::{SIGINT, SIGTERM};

/// What woke [`ShutdownSignal::wait`].
#[derive(Debug, PartialEq, Eq)]
pub enum Wake {
    /// The listener has a peer waiting.
    Ready,
    /// SIGTERM or SIGINT arrived.
    Shutdown,
}

/// SIGTERM and SIGINT, routed to a socket from the moment this is made.
pub struct ShutdownSignal {
    signalled: UnixStream,
}

impl ShutdownSignal {
    /// Installs the handlers for SIGTERM and SIGINT.
    pub fn install() -> io::Result<Self> {
        Self::install_for(&[SIGTERM, SIGINT])
    }

    /// Installs the handlers for `signals`.
    pub fn install_for(signals: &[std::ffi::c_int]) -> io::Result<Self> {
        let (signalled, handler_end) = UnixStream::pair()?;
        handler_end.set_nonblocking(true)?;
        for &signal in signals {
            signal_hook::low_level::pipe::register(signal, handler_end.try_clone()?)?;
        }
        Ok(Self { signalled })
    }

    /// The socket the handlers write to, for a loop that polls it itself.
    pub fn into_socket(self) -> UnixStream {
        self.signalled
    }

    /// Blocks until `listener` is readable or a signal arrives; a signal wins.
    pub fn wait(&self, listener: &impl AsFd) -> io::Result<Wake> {
        loop {
            let mut fds = [
                PollFd::new(self.signalled.as_fd(), PollFlags::POLLIN),
                PollFd::new(listener.as_fd(), PollFlags::POLLIN),
            ];
            match poll(&mut fds, PollTimeout::NONE) {
                Ok(_) => {}
                Err(nix::errno::Errno::EINTR) => continue,
                Err(errno) => return Err(errno.into()),
            }
            let woke = |fd: &PollFd<'_>| fd.revents().is_some_and(|r| !r.is_empty());
            if woke(&fds[0]) {
                return Ok(Wake::Shutdown);
            }
            if woke(&fds[1]) {
                return Ok(Wake::Ready);
            }
        }
    }
}
