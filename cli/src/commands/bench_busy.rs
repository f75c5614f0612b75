//! `bench --busy-loops K`: K processes spinning beside the bench, as other
//! work on a shared machine does, so that a table run under load can be
//! set beside the quiet one.

use std::process::{Child, Command, Stdio};

/// K `sh -c 'while :; do :; done'` processes, killed and reaped when
/// dropped.
pub struct BusyLoops(Vec<Child>);

impl BusyLoops {
    /// Starts `count` busy loops.
    pub fn start(count: usize) -> Result<Self, String> {
        let mut loops = Self(Vec::with_capacity(count));
        for _ in 0..count {
            let child = Command::new("sh")
                .args(["-c", "while :; do :; done"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| format!("starting a busy loop (sh -c ...): {e}"))?;
            loops.0.push(child);
        }
        Ok(loops)
    }
}

impl Drop for BusyLoops {
    fn drop(&mut self) {
        for child in &mut self.0 {
            // Already gone is as good as killed.
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
