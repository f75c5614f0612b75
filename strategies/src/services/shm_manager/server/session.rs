//! One client's session: reading `AllocInfo` messages that may arrive in
//! pieces, and sending the `OK`s it is owed.

use std::collections::HashMap;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::time::Instant;

use nix::errno::Errno;
use nix::poll::PollFlags;
use nix::sys::socket::{MsgFlags, recv, send};

use super::serve_loop::{ServeState, log};
use crate::platform::segment_name::SegmentName;
use crate::services::shm_manager::alloc_info::{ALLOC_INFO_SIZE, AllocInfo};
use crate::services::shm_manager::in_flight::{is_in_flight_notice, notice_receiver};
use crate::services::shm_manager::pipeline::{PIPELINE_ACK, is_pipeline_probe};

/// How many bytes one `recv` takes from a client.
const READ_CHUNK: usize = ALLOC_INFO_SIZE * 16;

/// How many `recv`s one client gets per wake-up, so that one busy client
/// cannot starve the others.
const READS_PER_WAKE: usize = 16;

/// `OK` replies, ready to send in bulk.
const OKS: &[u8; 66] = b"OKOKOKOKOKOKOKOKOKOKOKOKOKOKOKOKOKOKOKOKOKOKOKOKOKOKOKOKOKOKOKOKOK";

/// A connected client.
#[derive(Debug)]
pub(super) struct Client {
    pub(super) stream: UnixStream,
    /// A message being assembled, `filled` bytes so far.
    inbox: [u8; ALLOC_INFO_SIZE],
    filled: usize,
    /// Reply bytes not yet sent: 2 per registration, or the 2 of
    /// [`PIPELINE_ACK`] (sent first: the probe is a session's first
    /// message). While any are owed the client is not read, so one that
    /// never reads cannot grow anything.
    pub(super) owed: usize,
    /// Whether `owed` holds the ack rather than `OK`s.
    acking: bool,
    /// Whether the client asked for registrations without replies
    /// ([`crate::services::shm_manager::pipeline`]).
    pub(super) pipelined: bool,
    /// Whether any message came yet: only the first may be the probe.
    greeted: bool,
    /// The pid its last message gave, for the log.
    pub(super) pid: Option<i32>,
    /// The names it registered and has not freed, with how many times.
    pub(super) names: HashMap<SegmentName, u32>,
}

impl Client {
    /// A client just accepted, with nothing read, owed or registered.
    pub(super) fn new(stream: UnixStream) -> Self {
        Client {
            stream,
            inbox: [0; ALLOC_INFO_SIZE],
            filled: 0,
            owed: 0,
            acking: false,
            pipelined: false,
            greeted: false,
            pid: None,
            names: HashMap::new(),
        }
    }
}

/// What servicing a client came to.
enum Outcome {
    Keep,
    Gone,
    Rejected(String),
}

impl ServeState {
    /// Handles what `poll` reported for one client.
    pub(super) fn service(&mut self, id: u64, events: PollFlags, now: Instant) {
        let Some(mut client) = self.clients.remove(&id) else {
            return;
        };
        let outcome = self.exchange(id, &mut client, events);
        match outcome {
            Outcome::Keep => {
                self.clients.insert(id, client);
            }
            Outcome::Gone => self.disconnect(id, client, now),
            Outcome::Rejected(reason) => {
                let pid = client
                    .pid
                    .map_or_else(String::new, |p| format!(" (pid {p})"));
                log(format_args!(
                    "disconnected a client{pid}: {reason}; other clients are unaffected"
                ));
                self.report.rejected_clients += 1;
                self.disconnect(id, client, now);
            }
        }
    }

    /// Sends what is owed, then reads and handles messages until the client
    /// has nothing more, owes replies it cannot take, or had its share.
    fn exchange(&mut self, id: u64, client: &mut Client, events: PollFlags) -> Outcome {
        if !flush_replies(client) {
            return Outcome::Gone;
        }
        let readable = PollFlags::POLLIN | PollFlags::POLLHUP | PollFlags::POLLERR;
        if !events.intersects(readable) {
            return Outcome::Keep;
        }
        let mut chunk = [0u8; READ_CHUNK];
        for _ in 0..READS_PER_WAKE {
            if client.owed > 0 {
                break;
            }
            let received = match recv(
                client.stream.as_raw_fd(),
                &mut chunk,
                MsgFlags::MSG_DONTWAIT,
            ) {
                // End of stream: messages sent before it were handled.
                Ok(0) => return Outcome::Gone,
                Ok(n) => n,
                Err(Errno::EAGAIN) => break,
                Err(Errno::EINTR) => continue,
                Err(_) => return Outcome::Gone,
            };
            let mut rest = &chunk[..received];
            while !rest.is_empty() {
                let take = (ALLOC_INFO_SIZE - client.filled).min(rest.len());
                client.inbox[client.filled..client.filled + take].copy_from_slice(&rest[..take]);
                client.filled += take;
                rest = &rest[take..];
                if client.filled < ALLOC_INFO_SIZE {
                    break;
                }
                client.filled = 0;
                let first = !std::mem::replace(&mut client.greeted, true);
                if is_pipeline_probe(&client.inbox) {
                    // Later, it is a free of a name nothing has: libshm's
                    // manager ignores it, and so does this one.
                    if first {
                        client.pipelined = true;
                        client.acking = true;
                        client.owed = PIPELINE_ACK.len();
                    }
                    continue;
                }
                let info = match AllocInfo::decode(&client.inbox) {
                    Ok(info) => info,
                    Err(err) => return Outcome::Rejected(err.to_string()),
                };
                if is_in_flight_notice(&client.inbox) {
                    self.in_flight(&info.name, notice_receiver(&client.inbox));
                    continue;
                }
                if let Err(reason) = self.handle_message(id, client, info) {
                    return Outcome::Rejected(reason);
                }
            }
            if !flush_replies(client) {
                return Outcome::Gone;
            }
        }
        Outcome::Keep
    }
}

/// Sends the client's owed `OK`s, as far as its socket takes them; `false`
/// when the client is gone.
fn flush_replies(client: &mut Client) -> bool {
    while client.acking {
        let start = PIPELINE_ACK.len() - client.owed;
        match send(
            client.stream.as_raw_fd(),
            &PIPELINE_ACK[start..],
            MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL,
        ) {
            Ok(n) => {
                client.owed -= n;
                client.acking = client.owed > 0;
            }
            Err(Errno::EAGAIN) => return true,
            Err(Errno::EINTR) => {}
            Err(_) => return false,
        }
    }
    while client.owed > 0 {
        // An odd count means the `O` of the current reply went out already.
        let start = client.owed % 2;
        let len = client.owed.min(OKS.len() - start);
        match send(
            client.stream.as_raw_fd(),
            &OKS[start..start + len],
            MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL,
        ) {
            Ok(n) => client.owed -= n,
            Err(Errno::EAGAIN) => return true,
            Err(Errno::EINTR) => {}
            Err(_) => return false,
        }
    }
    true
}
