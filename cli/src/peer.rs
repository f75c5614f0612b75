//! The other process of `tensorshare demo` and of the benchmarks
//! (`tensorshare-bench`): the program itself again under a hidden
//! subcommand, or a torch peer. It connects back to a listener, with the
//! authkey in `TENSORSHARE_AUTHKEY`; it is killed if the run fails before
//! it finishes, and a peer that exits before connecting is an error, not a
//! wait forever.

use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::Duration;

use tensorshare::connection::{
    AUTHKEY_ENV, Address, Authkey, Client, Connection, ConnectionOptions, Listener,
};

use crate::error::{CliError, ERROR_PREFIX};

/// How often to look whether the peer has gone while waiting for it.
const ACCEPT_POLL: Duration = Duration::from_millis(10);

/// A peer process, killed if the run fails before it finishes.
pub struct Peer(Option<Child>);

impl Peer {
    /// Starts `command`.
    pub fn spawn(command: &mut Command) -> std::io::Result<Self> {
        command.spawn().map(|child| Self(Some(child)))
    }

    /// Starts this program as `subcommand --connect ADDRESS ARGS...`, with
    /// `authkey` in its environment; it calls [`connect_back`].
    pub fn spawn_self(
        subcommand: &str,
        address: &Address,
        authkey: &Authkey,
        args: &[&str],
    ) -> std::io::Result<Self> {
        Self::spawn(&mut Self::self_command(
            subcommand,
            &address.to_string(),
            authkey,
            args,
        )?)
    }

    /// The command [`spawn_self`](Self::spawn_self) starts, for a caller
    /// that pipes its output or runs it behind a wrapper.
    pub fn self_command(
        subcommand: &str,
        address: &str,
        authkey: &Authkey,
        args: &[&str],
    ) -> std::io::Result<Command> {
        let mut command = Command::new(std::env::current_exe()?);
        command
            .args([subcommand, "--connect", address])
            .args(args)
            .env(AUTHKEY_ENV, authkey.to_hex())
            .stdin(Stdio::null());
        Ok(command)
    }

    /// The peer's stdout, if piped and not taken yet, for a peer that says
    /// something before it finishes; [`Peer::finish`] then has none.
    pub fn take_stdout(&mut self) -> Option<std::process::ChildStdout> {
        self.0.as_mut()?.stdout.take()
    }

    /// The peer's pid.
    pub fn id(&self) -> u32 {
        self.0.as_ref().map_or(0, Child::id)
    }

    /// Accepts the peer's connection on `listener`, or says why the peer
    /// exited without making one.
    pub fn accept(&mut self, listener: &Listener) -> Result<Connection, String> {
        listener
            .set_nonblocking(true)
            .map_err(|e| format!("waiting for the peer: {e}"))?;
        loop {
            match listener.accept() {
                Ok(connection) => return Ok(connection),
                Err(e) if e.is_would_block() => {}
                // Not our peer, which holds the authkey: any process that
                // can see the abstract name may connect. Wait on.
                Err(e) if e.is_handshake_failure() => {}
                Err(e) => return Err(format!("accepting the peer: {e}")),
            }
            let child = self.0.as_mut().ok_or("the peer has already finished")?;
            if let Ok(Some(status)) = child.try_wait() {
                // Its stderr, if piped, says why.
                return Err(self
                    .finish()
                    .err()
                    .unwrap_or_else(|| format!("the peer exited ({status}) before connecting")));
            }
            thread::sleep(ACCEPT_POLL);
        }
    }

    /// Waits for the peer; its stdout when it succeeded (if piped), its
    /// stderr when not.
    pub fn finish(&mut self) -> Result<String, String> {
        let child = self.0.take().ok_or("the peer has already finished")?;
        let output = child
            .wait_with_output()
            .map_err(|e| format!("waiting for the peer: {e}"))?;
        if output.status.success() {
            Ok(String::from_utf8_lossy(&output.stdout).into_owned())
        } else {
            // A tensorshare peer prints one line, its error, after `error: `.
            let stderr = String::from_utf8_lossy(&output.stderr);
            let stderr = stderr.trim();
            Err(format!(
                "the peer process failed ({}): {}",
                output.status,
                stderr.strip_prefix(ERROR_PREFIX).unwrap_or(stderr)
            ))
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The peer's side of [`Peer::spawn_self`]: the authkey from the
/// environment, and a connection to `address` made with `options`.
pub fn connect_back(
    address: &Address,
    options: ConnectionOptions,
) -> Result<(Authkey, Connection), CliError> {
    let authkey = Authkey::from_env()?.ok_or("TENSORSHARE_AUTHKEY is not set")?;
    let connection = Client::connect(address, &authkey, options)?;
    Ok((authkey, connection))
}
