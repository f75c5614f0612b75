//! Which clients registered which names, and unlinking the names nobody
//! holds.

use std::collections::HashSet;
use std::os::fd::OwnedFd;
use std::time::Instant;

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::mman::{shm_open, shm_unlink};
use nix::sys::stat::{Mode, fstat};
use nix::sys::uio::pread;

use super::MAX_REGISTERED_NAMES;
use super::serve_loop::{ServeState, log};
use super::session::Client;
use crate::platform::lease::{Probe, lease_exclusively};
use crate::platform::owner::check_own_user;
use crate::platform::process::Recipients;
use crate::platform::segment_name::SegmentName;
use crate::services::shm_manager::alloc_info::AllocInfo;

/// What one name's entry holds.
#[derive(Debug, Default)]
pub(super) struct Registration {
    /// The clients that registered it and have not freed it.
    registrants: HashSet<u64>,
    /// When its last registrant disconnected without freeing it.
    orphaned_at: Option<Instant>,
    /// The counts in the segment's header that belong to registrants gone
    /// without freeing it: each registrant counted itself once per
    /// registration, and a process that vanished never takes its count
    /// back. Whatever the header holds beyond them is someone's alive.
    dead_holds: u32,
    /// When its header was first seen counting a message nobody opened,
    /// its registrants gone: the in-flight wait runs from then.
    in_flight_since: Option<Instant>,
    /// The processes its senders said messages naming it went to (their
    /// in-flight notices).
    receivers: Recipients,
}

impl Registration {
    /// Whether every message its header may count went to a process that
    /// has exited: told of every receiver, and of none alive.
    fn receivers_gone(&self) -> bool {
        self.receivers.all_exited()
    }

    /// Whether a receiver it was told of may still read it.
    fn awaits_known_receiver(&self) -> bool {
        self.receivers.is_known() && !self.receivers_gone()
    }
}

impl ServeState {
    pub(super) fn handle_message(
        &mut self,
        id: u64,
        client: &mut Client,
        info: AllocInfo,
    ) -> Result<(), String> {
        client.pid = Some(info.pid);
        if info.free {
            self.free(id, client, &info.name);
            return Ok(());
        }
        if !self.names.contains_key(&info.name) && self.names.len() >= MAX_REGISTERED_NAMES {
            return Err(format!(
                "it registered more than {MAX_REGISTERED_NAMES} segments at once"
            ));
        }
        let registration = self.names.entry(info.name.clone()).or_default();
        registration.registrants.insert(id);
        registration.orphaned_at = None;
        registration.in_flight_since = None;
        let count = client.names.entry(info.name).or_insert(0);
        *count = count.saturating_add(1);
        if !client.pipelined {
            client.owed += 2;
        }
        self.report.registrations += 1;
        Ok(())
    }

    /// An in-flight notice: a message naming `name` is on its way to
    /// process `receiver` (`None`: a pid no process has). A name this
    /// manager does not know is not tracked for it.
    pub(super) fn in_flight(&mut self, name: &SegmentName, receiver: Option<u32>) {
        if let Some(registration) = self.names.get_mut(name) {
            registration.receivers.add(receiver);
        }
    }

    /// libshm's free: the client no longer uses `name`; the name is dropped
    /// once the object is gone. A name still present, with or without
    /// registrants, is kept: a message naming it may be in flight. One
    /// left with no registrant whose messages went to receivers this
    /// manager was told of is unlinked at once when they have all exited
    /// and nothing maps it (nobody will read it), else looked at again
    /// after a grace period, as an orphan.
    fn free(&mut self, id: u64, client: &mut Client, name: &SegmentName) {
        if let Some(count) = client.names.get_mut(name) {
            *count -= 1;
            if *count == 0 {
                client.names.remove(name);
                if let Some(registration) = self.names.get_mut(name) {
                    registration.registrants.remove(&id);
                }
            }
        }
        if !self.names.contains_key(name) {
            return;
        }
        if object_exists(name) {
            let Some(registration) = self.names.get_mut(name).filter(|registration| {
                registration.registrants.is_empty() && registration.receivers.is_known()
            }) else {
                return;
            };
            if registration.receivers_gone() && self.unlink(name) == Unlink::Done {
                self.names.remove(name);
                return;
            }
            if let Some(registration) = self.names.get_mut(name) {
                let now = Instant::now();
                registration.orphaned_at = Some(now);
                self.orphans.push_back((now, name.clone()));
            }
            return;
        }
        if let Some(registration) = self.names.remove(name) {
            for other in registration.registrants {
                if other == id {
                    client.names.remove(name);
                } else if let Some(other) = self.clients.get_mut(&other) {
                    other.names.remove(name);
                }
            }
        }
    }

    /// A client is gone: the names it still held lose a registrant, and
    /// those left with none start their grace period.
    pub(super) fn disconnect(&mut self, id: u64, client: Client, now: Instant) {
        for (name, holds) in client.names {
            let Some(registration) = self.names.get_mut(&name) else {
                continue;
            };
            registration.registrants.remove(&id);
            registration.dead_holds = registration.dead_holds.saturating_add(holds);
            if registration.registrants.is_empty() {
                registration.orphaned_at = Some(now);
                self.orphans.push_back((now, name));
            }
        }
    }

    /// Unlinks the names whose grace period is over and that nobody
    /// registered again, unless a message naming one is still on its way
    /// to a receiver while other clients are connected.
    ///
    /// A sender that exits (or is killed) with messages in flight leaves
    /// their segments with no registrant; the receiver registers each only
    /// when it opens it, which a slow receiver may do long after. The
    /// header tells: every message adds a count that only its receiver
    /// takes back, so a count beyond those of the registrants that
    /// vanished is a message not yet opened (or a holder registered
    /// elsewhere). Such a name is kept as a freed one is, until the last
    /// holder unlinks it or this manager goes idle, as torch's manager
    /// keeps every name until it exits.
    ///
    /// A name whose senders said which processes its messages went to
    /// (in-flight notices) is looked at again every grace period instead,
    /// clients or not: once every one of them has exited, the count is
    /// nobody's, and the name is unlinked as soon as nothing maps it.
    pub(super) fn expire_orphans(&mut self, now: Instant) {
        while let Some((since, _)) = self.orphans.front() {
            if now < *since + self.idle_timeout {
                return;
            }
            let Some((since, name)) = self.orphans.pop_front() else {
                return;
            };
            let Some(registration) = self.names.get_mut(&name).filter(|registration| {
                registration.registrants.is_empty() && registration.orphaned_at == Some(since)
            }) else {
                continue;
            };
            let in_flight =
                !registration.receivers_gone() && counted_beyond(&name, registration.dead_holds);
            if in_flight && registration.awaits_known_receiver() {
                // Looked at again after another grace period: the receiver
                // may read it or exit meanwhile. With no client left, the
                // in-flight wait bounds it ([`Self::unlink_unheld`]).
                registration.orphaned_at = Some(now);
                self.orphans.push_back((now, name));
                continue;
            }
            if in_flight && !self.clients.is_empty() {
                registration.in_flight_since.get_or_insert(now);
                registration.orphaned_at = None;
                continue;
            }
            if self.unlink(&name) == Unlink::Held {
                // Mapped by a process registered elsewhere: look again
                // after another grace period.
                if let Some(registration) = self.names.get_mut(&name) {
                    registration.orphaned_at = Some(now);
                }
                self.orphans.push_back((now, name));
            } else {
                self.names.remove(&name);
            }
        }
    }

    /// Unlinks every registered name that nothing holds, as an idle
    /// manager about to exit; those some process still has open or mapped
    /// stay registered, and so do those a message not yet opened counts,
    /// for the in-flight wait. Whether any stayed.
    ///
    /// A sender may exit as soon as it sent, before its receiver opened
    /// anything and so before the receiver is a client here: with no
    /// client left, the header's count is all that says a message is
    /// still to be read. A receiver killed with messages unread leaves the
    /// same count, which is why the wait ends.
    pub(super) fn unlink_unheld(&mut self, now: Instant) -> bool {
        let names: Vec<SegmentName> = self.names.keys().cloned().collect();
        for name in names {
            if self.awaits_receiver(&name, now) {
                continue;
            }
            if self.unlink(&name) == Unlink::Done {
                self.names.remove(&name);
            }
        }
        !self.names.is_empty()
    }

    /// Whether `name`, with no client connected, is still within its
    /// in-flight wait: its header counts beyond the registrants gone
    /// without freeing it, and not every receiver it was sent to has
    /// exited.
    fn awaits_receiver(&mut self, name: &SegmentName, now: Instant) -> bool {
        let wait = self.in_flight_wait;
        let Some(registration) = self.names.get_mut(name) else {
            return false;
        };
        if registration.receivers_gone() || !counted_beyond(name, registration.dead_holds) {
            return false;
        }
        let since = *registration.in_flight_since.get_or_insert(now);
        now < since + wait
    }

    /// Unlinks every name still registered that nothing holds.
    pub(super) fn unlink_all(&mut self) {
        for name in std::mem::take(&mut self.names).into_keys() {
            if self.unlink(&name) == Unlink::Held {
                self.report.left_held.push(name);
            }
        }
    }

    /// Unlinks `name` if the object it names belongs to this manager's
    /// user and no process has it open or mapped.
    ///
    /// A client registers whatever name a message showed it, and a manager
    /// running as root could unlink anything: another user's object is left
    /// in place and logged. Every holder of a segment normally registers it
    /// here, so a name nobody is registered for is held by nobody; but
    /// after a manager died, its clients re-register with managers of their
    /// own, and a holder registered with another manager may still map it.
    /// Unlinking it then would fail that holder's own unlink when its count
    /// reaches zero, which torch answers by aborting the process: the
    /// kernel is asked first, with a write lease, which it grants only when
    /// no other open file refers to the object.
    fn unlink(&mut self, name: &SegmentName) -> Unlink {
        let opened = open_read_only(name);
        let (fd, stat) = match opened.and_then(|fd| fstat(&fd).map(|stat| (fd, stat))) {
            Ok(opened) => opened,
            Err(Errno::ENOENT) => return Unlink::Done,
            Err(errno) => {
                // Not this user's to open (`EACCES`), or no fd left: whose it
                // is cannot be told, so it is not unlinked.
                log(format_args!(
                    "left {name} in place: cannot check whose it is ({errno})"
                ));
                return Unlink::Done;
            }
        };
        if let Err(other) = check_own_user(&stat) {
            log(format_args!(
                "left {name} in place: it belongs to {}, and this manager runs as {}",
                other.owner, other.this
            ));
            self.report.left_to_other_users.push(name.clone());
            return Unlink::Done;
        }
        // Held while unlinking: until the name is gone, nobody can open the
        // object without first breaking the lease. Where leases cannot be
        // taken (disabled, another file system), the registrations decide
        // alone, as in torch's manager.
        let _hold = match lease_exclusively(fd) {
            Probe::Exclusive(hold) => hold,
            Probe::InUse => return Unlink::Held,
            Probe::Gone => return Unlink::Done,
            Probe::Replaced | Probe::Unavailable(_) => None,
        };
        // `/dev/shm` is sticky: no other user can put an object of their own
        // under a name this user's object holds, so the name checked above
        // is still this user's.
        match shm_unlink(name.as_str()) {
            Ok(()) => self.report.unlinked.push(name.clone()),
            Err(Errno::ENOENT) => {}
            Err(errno) => log(format_args!("cannot unlink {name} ({errno})")),
        }
        Unlink::Done
    }
}

/// What became of a name the manager was due to unlink.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unlink {
    /// Unlinked, gone already, or left for a reason that will not change.
    Done,
    /// Left in place: some process has it open or mapped.
    Held,
}

/// Opens the object `name` names read-only, as libshm tests for it;
/// `O_NONBLOCK`, so that a fifo under the name cannot stall the manager
/// (`shm_open` adds `O_NOFOLLOW` and `O_CLOEXEC` itself).
fn open_read_only(name: &SegmentName) -> Result<OwnedFd, Errno> {
    shm_open(
        name.as_str(),
        OFlag::O_RDONLY | OFlag::O_NONBLOCK | OFlag::O_NOCTTY,
        Mode::empty(),
    )
}

/// Whether the reference count in the header of the segment `name` is
/// above `dead_holds`. A count that cannot be read (the object is gone,
/// shorter than a count, or cannot be opened) counts as none.
fn counted_beyond(name: &SegmentName, dead_holds: u32) -> bool {
    let Ok(fd) = open_read_only(name) else {
        return false;
    };
    let mut count = [0u8; 4];
    match pread(&fd, &mut count, 0) {
        Ok(4) => i64::from(i32::from_ne_bytes(count)) > i64::from(dead_holds),
        _ => false,
    }
}

/// Whether a shared-memory object named `name` exists, as libshm tests it:
/// it opens read-only. An object that exists but cannot be opened (another
/// user's, or no fd left) counts as existing: forgetting it would leak it.
fn object_exists(name: &SegmentName) -> bool {
    !matches!(open_read_only(name), Err(Errno::ENOENT))
}
