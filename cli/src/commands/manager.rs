//! `tensorshare manager [--daemon] [--socket PATH] [--idle-timeout SECS] [--in-flight-wait SECS]`:
//! a shared-memory manager that torch processes and ours register
//! `file_system` segments with, speaking libshm's protocol.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use tensorshare_cli::error::CliError;
use tensorshare_strategies::services::shm_manager::{
    DEFAULT_IDLE_TIMEOUT, DEFAULT_IN_FLIGHT_WAIT, ManagerReport, ManagerServer, ServeOptions,
    StopReason, in_flight_wait_from_env, parse_in_flight_wait,
};

use super::shutdown::ShutdownSignal;

#[derive(Debug, Args)]
pub struct ManagerArgs {
    /// Fork into the background once the socket path is printed: the
    /// command returns at once and the manager runs in its own session with
    /// its standard streams on /dev/null.
    #[arg(long)]
    daemon: bool,
    /// Listen on this socket path instead of `manager.sock` in a fresh
    /// private directory under $TMPDIR.
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// Exit after this many seconds with no client, unlinking every segment
    /// still registered (waiting on while a process still maps one); also
    /// how long a segment whose last holder died is kept for another
    /// process to claim it.
    #[arg(long, value_name = "SECS", default_value_t = DEFAULT_IDLE_TIMEOUT.as_secs_f64(),
          value_parser = parse_seconds)]
    idle_timeout: f64,
    /// With no client left, keep this many seconds a segment whose header
    /// still counts a message nobody opened (its sender gone, its receiver
    /// not yet connected here) before unlinking it [default:
    /// TENSORSHARE_SHM_IN_FLIGHT_WAIT, or 300]
    #[arg(long, value_name = "SECS", value_parser = parse_in_flight_wait)]
    in_flight_wait: Option<Duration>,
}

/// Seconds, above zero and at most a day.
fn parse_seconds(text: &str) -> Result<f64, String> {
    let secs: f64 = text
        .parse()
        .map_err(|_| format!("{text:?} is not a number of seconds"))?;
    if !(secs > 0.0 && secs <= 86_400.0) {
        return Err(format!(
            "{text} is out of range: give more than 0 and at most 86400 seconds"
        ));
    }
    Ok(secs)
}

pub fn run(args: ManagerArgs) -> Result<(), CliError> {
    let idle_timeout = Duration::from_secs_f64(args.idle_timeout);
    let in_flight_wait = match args.in_flight_wait {
        Some(wait) => wait,
        None => in_flight_wait_from_env()?.unwrap_or(DEFAULT_IN_FLIGHT_WAIT),
    };
    // First, so that no signal kills the manager between its first line and
    // serving; a daemon's fork inherits the handlers and their socket.
    // SIGHUP too: the terminal of a foreground manager closed. Each stops it
    // as when idle, unlinking what is registered.
    let shutdown = ShutdownSignal::install_for(&[SIGTERM, SIGINT, SIGHUP])?.into_socket();
    let bound = match &args.socket {
        Some(path) => ManagerServer::bind(path),
        None => ManagerServer::bind_in_private_dir(),
    };
    let mut stdout = std::io::stdout().lock();
    let server = match bound {
        Ok(server) => server,
        Err(error) => {
            // The launcher reads one line: torch's managers say `ERROR: ...`.
            let _ = writeln!(stdout, "ERROR: {error}");
            let _ = stdout.flush();
            return Err(error.into());
        }
    };
    stdout.write_all(server.handle().as_bytes())?;
    stdout.write_all(b"\n")?;
    stdout.flush()?;
    drop(stdout);

    let server = if args.daemon {
        server.daemonize()?
    } else {
        server
    };
    let report = server.serve(
        ServeOptions::default()
            .with_idle_timeout(idle_timeout)
            .with_in_flight_wait(in_flight_wait)
            .with_shutdown(shutdown),
    )?;
    eprintln!("tensorshare manager: {}", summary(&report, idle_timeout));
    Ok(())
}

/// One line on what the manager did.
fn summary(report: &ManagerReport, idle_timeout: Duration) -> String {
    let why = match report.stop {
        StopReason::Idle => format!("no client for {}s", idle_timeout.as_secs_f64()),
        StopReason::Shutdown => "stopped by signal".to_owned(),
        _ => "stopped".to_owned(),
    };
    let plural = |n: u64, word: &str| format!("{n} {word}{}", if n == 1 { "" } else { "s" });
    let unlinked = u64::try_from(report.unlinked.len()).unwrap_or(u64::MAX);
    let mut line = format!(
        "{why}; served {}, {}",
        plural(report.clients, "client"),
        plural(report.registrations, "registration"),
    );
    if report.rejected_clients > 0 {
        line.push_str(&format!(
            ", disconnected {} sending garbage",
            report.rejected_clients
        ));
    }
    line.push_str(&format!("; unlinked {}", plural(unlinked, "segment")));
    line
}
