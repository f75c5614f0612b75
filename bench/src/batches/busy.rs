//! What runs beside a loaded table of `--workload batches`, as other
//! work on a shared machine does: `--busy-loops K`, K processes spinning;
//! `--busy-io SIZE`, a writer pushing files of SIZE through the page cache
//! to disk over and over, as a package install or a checkpoint save does.

use std::path::Path;
use std::process::{Child, Command, Stdio};

/// What a loaded table runs beside.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Load {
    /// `sh -c 'while :; do :; done'` processes.
    Loops(usize),
    /// One writer of files of this many MiB, at nice 19.
    Io { mib: u64 },
}

impl Load {
    /// How the tables' headers and the slowdown lines name it.
    pub fn describe(self) -> String {
        match self {
            Load::Loops(count) => format!("{count} busy loops"),
            Load::Io { mib } => format!("a writer of {mib} MiB files at nice 19"),
        }
    }

    /// Starts it, in `dir` for a writer's file: running until dropped.
    pub fn start(self, dir: &Path) -> Result<Background, String> {
        let commands = match self {
            Load::Loops(count) => (0..count)
                .map(|_| {
                    let mut command = Command::new("sh");
                    command.args(["-c", "while :; do :; done"]);
                    command
                })
                .collect(),
            Load::Io { mib } => {
                // Written and removed over and over: the kernel's flusher
                // writes the dirty pages back while the next file fills
                // the page cache, as behind a `pip install` of torch.
                let mut command = Command::new("nice");
                command
                    .args(["-n", "19", "sh", "-c"])
                    .arg(
                        "while :; do dd if=/dev/zero of=\"$1\" bs=1M count=\"$2\" \
                         status=none || exit; rm -f \"$1\"; done",
                    )
                    .arg("sh")
                    .arg(dir.join("tensorshare-bench-busy-io"))
                    .arg(mib.to_string());
                vec![command]
            }
        };
        let mut background = Background(Vec::new());
        for mut command in commands {
            let child = command
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| format!("starting {} ({command:?}): {e}", self.describe()))?;
            background.0.push(child);
        }
        Ok(background)
    }
}

/// The processes of a [`Load`], killed and reaped when dropped.
pub struct Background(Vec<Child>);

impl Drop for Background {
    fn drop(&mut self) {
        for child in &mut self.0 {
            // Already gone is as good as killed.
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
