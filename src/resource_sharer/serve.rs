//! The serving threads: one accepts, a few workers each serve one connection
//! at a time, as CPython's `_ResourceSharer._serve` does on its one thread.

use std::io::ErrorKind;
use std::os::fd::AsFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::Ordering;
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use nix::sys::socket::getsockopt;
use nix::sys::socket::sockopt::PeerCredentials;
use nix::unistd::geteuid;
use tensorshare_compat::connection::{
    AuthError, FramingError, read_message, server_handshake_noting_refusal,
};
use tensorshare_compat::resource_sharer::{MAX_REQUEST_LEN, SharerRequest};
use tensorshare_strategies::platform::fd_passing::send_fd_batch;

use super::server::Shared;
use crate::connection::deadline::DeadlineStream;
use crate::connection::is_timeout;
use crate::sync::lock;

/// How long the accept thread waits after a failed `accept` (such as
/// `EMFILE`, which persists until some fd is closed) before trying again.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(10);

/// How one connection ended; each is counted in `SharerStats`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    Served,
    /// A tensorshare receiver gave back this many keys.
    Released(usize),
    /// A tensorshare receiver no longer maps the storages of this many
    /// keys, and gave back this many of them that it had not released yet.
    Unmapped {
        keys: usize,
        released: usize,
    },
    /// A process of another user (not root) connected.
    OtherUser,
    WrongAuthkey,
    BadHandshake,
    MalformedRequest,
    UnknownKey,
    TimedOut,
    Disconnected,
    SendFailed,
}

/// Whose connections a sharer serves: its own user's and root's, as a
/// socket file in a mode-0700 directory lets in. An abstract name has no
/// permissions, so the peer's credentials are checked instead.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PeerUids {
    own: u32,
}

impl PeerUids {
    pub(crate) fn this_user() -> Self {
        Self {
            own: geteuid().as_raw(),
        }
    }

    /// Whether the process at the other end of `stream` may be served: its
    /// effective uid when it connected (`SO_PEERCRED`) is ours or root's.
    /// A peer whose credentials cannot be read is not served.
    fn admits(self, stream: &UnixStream) -> bool {
        getsockopt(stream, PeerCredentials)
            .is_ok_and(|credentials| credentials.uid() == self.own || credentials.uid() == 0)
    }
}

/// Accepts connections and queues them for the workers until shutdown.
pub(crate) fn accept_loop(shared: &Shared, listener: &UnixListener) {
    while !shared.stopping.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((stream, _)) => {
                if shared.stopping.load(Ordering::SeqCst) {
                    return;
                }
                // Closed at once, before any byte is read: another user's
                // process cannot hold a worker or try authkeys.
                if !shared.peer_uids.admits(&stream) {
                    shared.counters.record(Outcome::OtherUser);
                    continue;
                }
                // Cloned per connection so that taking the sender out at
                // shutdown closes the channel even while this thread sits in
                // `accept`.
                let Some(sender) = lock(&shared.queue).clone() else {
                    return;
                };
                if sender.send(stream).is_err() {
                    return;
                }
            }
            Err(error) if error.kind() == ErrorKind::Interrupted => {}
            Err(_) if shared.stopping.load(Ordering::SeqCst) => return,
            Err(_) => {
                shared.counters.record_accept_failure();
                thread::sleep(ACCEPT_BACKOFF);
            }
        }
    }
}

/// Serves queued connections until the queue closes.
pub(crate) fn worker_loop(shared: &Shared, receiver: &Mutex<Receiver<UnixStream>>, slot: usize) {
    loop {
        let next = lock(receiver).recv();
        let Ok(stream) = next else {
            return;
        };
        let stream = Arc::new(stream);
        let in_flight = shared.in_flight.get(slot);
        if let Some(in_flight) = in_flight {
            *lock(in_flight) = Some(Arc::clone(&stream));
        }
        // Checked after publishing the stream: shutdown sets the flag before
        // it cuts off published streams, so one of the two sees the other.
        if !shared.stopping.load(Ordering::SeqCst) {
            serve_connection(shared, &stream);
        }
        if let Some(in_flight) = in_flight {
            *lock(in_flight) = None;
        }
    }
}

/// One connection, as CPython's `_serve` loop body: handshake, read
/// `(key, pid)`, pop the key, send its fd, close our copy. A tensorshare
/// receiver's [`ReleaseRequest`](tensorshare_compat::resource_sharer::ReleaseRequest) instead closes the
/// fds it names, which reached it attached to their message. How it ended
/// is counted in `shared.counters`.
fn serve_connection(shared: &Shared, stream: &UnixStream) {
    let mut io = DeadlineStream::new(stream, shared.options.connection_timeout());
    // A refusal is counted before the peer hears `#FAILURE#`: a refused peer
    // may give up and break its connection to this process at once, and the
    // error that raises here names the refusal as its cause only if the
    // count already holds it.
    let mut refusal_counted = false;
    let handshake = server_handshake_noting_refusal(
        &mut io,
        &shared.authkey,
        shared.options.dialect(),
        |refusal| {
            shared.counters.record(handshake_outcome(refusal));
            refusal_counted = true;
        },
    );
    let outcome = match handshake {
        Ok(_) => serve_request(shared, stream, &mut io),
        Err(_) if refusal_counted => return,
        Err(error) => handshake_outcome(&error),
    };
    shared.counters.record(outcome);
}

/// After the handshake: the `(key, pid)` request, or a tensorshare
/// receiver's release or unmapped notice.
fn serve_request(shared: &Shared, stream: &UnixStream, io: &mut DeadlineStream<'_>) -> Outcome {
    let payload = match read_message(io, MAX_REQUEST_LEN) {
        Ok(payload) => payload,
        Err(error) => return framing_outcome(&error),
    };
    let request = match SharerRequest::from_pickle(&payload) {
        Ok(SharerRequest::Fetch(request)) => request,
        Ok(SharerRequest::Release(release)) => {
            let released = release
                .keys
                .iter()
                .filter(|&&key| shared.take(key).is_some())
                .count();
            return Outcome::Released(released);
        }
        Ok(SharerRequest::Unmapped(unmapped)) => {
            let (keys, released) = shared.note_unmapped(&unmapped.keys);
            return Outcome::Unmapped { keys, released };
        }
        Err(_) => return Outcome::MalformedRequest,
    };
    // CPython pops before sending: whatever happens next, the key is spent.
    let Some(fd) = shared.take(request.key) else {
        return Outcome::UnknownKey;
    };
    shared.note_fetched(request.key);
    if io.arm_write_timeout().is_err() {
        return Outcome::TimedOut;
    }
    match send_fd_batch(stream.as_fd(), &[fd.as_fd()]) {
        Ok(()) => Outcome::Served,
        Err(_) => Outcome::SendFailed,
    }
}

fn handshake_outcome(error: &AuthError) -> Outcome {
    match error {
        AuthError::WrongAuthkey(_) => Outcome::WrongAuthkey,
        AuthError::Io(framing) => match framing_outcome(framing) {
            Outcome::MalformedRequest => Outcome::BadHandshake,
            other => other,
        },
        _ => Outcome::BadHandshake,
    }
}

fn framing_outcome(error: &FramingError) -> Outcome {
    match error {
        FramingError::Io(io) if is_timeout(io) => Outcome::TimedOut,
        FramingError::Closed | FramingError::Truncated { .. } | FramingError::Io(_) => {
            Outcome::Disconnected
        }
        _ => Outcome::MalformedRequest,
    }
}
