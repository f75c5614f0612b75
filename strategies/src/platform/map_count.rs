//! The system's cap on mappings per process (`vm.max_map_count`), which
//! makes `mmap` fail with `ENOMEM` exactly as running out of memory does.
//! Each shared storage a process maps is one mapping at least, so a process
//! holding tens of thousands of small storages meets this cap long before
//! any memory runs out; the user must hear which of the two it was.

use std::fs::File;
use std::io::Read;

/// How near the cap a failed `mmap` counts as hitting it: mapping may split
/// a neighbour, and other threads map and unmap meanwhile.
const SLACK: usize = 16;

/// The mappings this process holds against the system's cap on them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MapCount {
    /// Mappings this process holds (lines of `/proc/self/maps`).
    pub mappings: usize,
    /// `vm.max_map_count`.
    pub limit: usize,
}

/// This process's mappings and the cap, when they are at the cap: an
/// `ENOMEM` from `mmap` then means the cap, not memory. `None` when they
/// are not, or when `/proc` cannot tell.
pub(crate) fn at_the_cap() -> Option<MapCount> {
    let limit = std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let mappings = count_lines("/proc/self/maps")?;
    (mappings + SLACK >= limit).then_some(MapCount { mappings, limit })
}

/// Counts lines through a buffer on the stack: at the cap, a growing heap
/// buffer could itself need a mapping it cannot get.
fn count_lines(path: &str) -> Option<usize> {
    let mut file = File::open(path).ok()?;
    let mut buffer = [0u8; 16 << 10];
    let mut lines = 0;
    loop {
        match file.read(&mut buffer) {
            Ok(0) => return Some(lines),
            Ok(read) => lines += buffer[..read].iter().filter(|&&b| b == b'\n').count(),
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_far_from_the_cap() {
        assert!(count_lines("/proc/self/maps").is_some_and(|lines| lines > 0));
        assert_eq!(at_the_cap(), None);
    }
}
