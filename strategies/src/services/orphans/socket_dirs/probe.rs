//! Whether a socket in a directory is listening: bound in
//! `/proc/net/unix`, or answering a connection.

use std::collections::HashSet;
use std::os::fd::{AsRawFd, OwnedFd};

use nix::errno::Errno;
use nix::sys::socket::{AddressFamily, SockFlag, SockType, UnixAddr, connect, socket};

use crate::platform::private_dir::SocketDirName;

/// The paths of the sockets bound in this network namespace, from
/// `/proc/net/unix`; empty when it cannot be read (then connecting tells).
pub(super) fn bound_socket_paths() -> HashSet<Vec<u8>> {
    std::fs::read("/proc/net/unix")
        .map(|table| parse_bound_socket_paths(&table))
        .unwrap_or_default()
}

/// The socket paths of a `/proc/net/unix` table.
pub(in crate::services::orphans) fn parse_bound_socket_paths(table: &[u8]) -> HashSet<Vec<u8>> {
    table
        .split(|b| *b == b'\n')
        .skip(1)
        .filter_map(|line| {
            // `Num RefCount Protocol Flags Type St Inode [Path]`: the path
            // is the rest of the line after seven fields.
            let mut rest = line;
            for _ in 0..7 {
                let start = rest.iter().position(|b| *b != b' ')?;
                rest = rest.get(start..)?;
                let end = rest.iter().position(|b| *b == b' ')?;
                rest = rest.get(end..)?;
            }
            let start = rest.iter().position(|b| *b != b' ')?;
            let path = rest.get(start..)?;
            // Abstract names show as `@name`.
            path.starts_with(b"/").then(|| path.to_vec())
        })
        .collect()
}

/// Whether `/proc/net/unix` lists a socket bound at `.../dir/socket`.
/// Matched by the tail: the directory's random name is unique, and the
/// parent may have been named by another path when the socket was bound.
pub(super) fn is_bound(bound: &HashSet<Vec<u8>>, dir: &SocketDirName, socket: &str) -> bool {
    let tail = format!("/{dir}/{socket}");
    bound.iter().any(|path| path.ends_with(tail.as_bytes()))
}

/// What connecting to a socket file said.
pub(super) enum Knock {
    /// Nothing listens: the socket's listener is gone.
    Refused,
    /// Something listens (accepted, or its backlog is full).
    Listening,
    /// The file vanished meanwhile.
    Gone,
    Failed(Errno),
}

/// Connects to `socket` in the directory open as `dir`, without blocking
/// and without following the directory's path again.
pub(super) fn knock(dir: &OwnedFd, socket: &str) -> Knock {
    let path = format!("/proc/self/fd/{}/{socket}", dir.as_raw_fd());
    let Ok(address) = UnixAddr::new(path.as_str()) else {
        return Knock::Failed(Errno::ENAMETOOLONG);
    };
    let stream = match socket_stream() {
        Ok(stream) => stream,
        Err(errno) => return Knock::Failed(errno),
    };
    match connect(stream.as_raw_fd(), &address) {
        Ok(()) | Err(Errno::EAGAIN | Errno::EINPROGRESS) => Knock::Listening,
        Err(Errno::ECONNREFUSED) => Knock::Refused,
        Err(Errno::ENOENT) => Knock::Gone,
        Err(errno) => Knock::Failed(errno),
    }
    // Dropping `stream` closes the connection, if one was made.
}

fn socket_stream() -> Result<OwnedFd, Errno> {
    socket(
        AddressFamily::Unix,
        SockType::Stream,
        SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC,
        None,
    )
}
