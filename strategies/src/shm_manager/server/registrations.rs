//! Which clients registered which names, and unlinking the names nobody
//! holds.

use std::collections::HashSet;
use std::time::Instant;

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::mman::{shm_open, shm_unlink};
use nix::sys::stat::Mode;

use super::MAX_REGISTERED_NAMES;
use super::serve_loop::{ServeState, log};
use super::session::Client;
use crate::file_system::SegmentName;
use crate::shm_manager::alloc_info::AllocInfo;

/// What one name's entry holds.
#[derive(Debug, Default)]
pub(super) struct Registration {
    /// The clients that registered it and have not freed it.
    registrants: HashSet<u64>,
    /// When its last registrant disconnected without freeing it.
    orphaned_at: Option<Instant>,
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
        let count = client.names.entry(info.name).or_insert(0);
        *count = count.saturating_add(1);
        client.owed += 2;
        self.report.registrations += 1;
        Ok(())
    }

    /// libshm's free: the client no longer uses `name`; the name is dropped
    /// once the object is gone. A name still present, with or without
    /// registrants, is kept: a message naming it may be in flight.
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
        if !self.names.contains_key(name) || object_exists(name) {
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
        for name in client.names.into_keys() {
            let Some(registration) = self.names.get_mut(&name) else {
                continue;
            };
            registration.registrants.remove(&id);
            if registration.registrants.is_empty() {
                registration.orphaned_at = Some(now);
                self.orphans.push_back((now, name));
            }
        }
    }

    /// Unlinks the names whose grace period is over and that nobody
    /// registered again.
    pub(super) fn expire_orphans(&mut self, now: Instant) {
        while let Some((since, _)) = self.orphans.front() {
            if now < *since + self.idle_timeout {
                return;
            }
            let Some((since, name)) = self.orphans.pop_front() else {
                return;
            };
            let still_orphaned = self.names.get(&name).is_some_and(|registration| {
                registration.registrants.is_empty() && registration.orphaned_at == Some(since)
            });
            if still_orphaned {
                self.names.remove(&name);
                self.unlink(name);
            }
        }
    }

    /// Unlinks every name still registered.
    pub(super) fn unlink_all(&mut self) {
        for name in std::mem::take(&mut self.names).into_keys() {
            self.unlink(name);
        }
    }

    fn unlink(&mut self, name: SegmentName) {
        match shm_unlink(name.as_str()) {
            Ok(()) => self.report.unlinked.push(name),
            Err(Errno::ENOENT) => {}
            Err(errno) => log(format_args!("cannot unlink {name} ({errno})")),
        }
    }
}

/// Whether a shared-memory object named `name` exists, as libshm tests it:
/// it opens read-only. An object that exists but cannot be opened (another
/// user's, or no fd left) counts as existing: forgetting it would leak it.
fn object_exists(name: &SegmentName) -> bool {
    !matches!(
        shm_open(name.as_str(), OFlag::O_RDONLY, Mode::empty()),
        Err(Errno::ENOENT)
    )
}
