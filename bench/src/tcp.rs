//! `--workload tcp`: the `bytes` strategy over TCP, Rust
//! and torch at either end, against torch pickling to torch over the same
//! link. The listening end binds `--tcp-address` (loopback by default; an
//! address on a veth pair or a real NIC to cross hosts).
//!
//! Every path streams fresh uint8 tensors one way as the streams workload
//! does (`bench_peer.py`'s protocol): a Rust producer allocates each on the
//! heap and sends it as `bytes` (written from the storage, no copy before
//! the socket); torch's producer sends `conn.send_bytes(pickle.dumps(t))`.
//! Consumers rebuild every tensor and check it.
//!
//! Then a torch client's round trip through an echo server, one tensor at
//! a time (`send_bytes(pickle.dumps(t))`, then `recv()`): through
//! `tensorshare echo --strategy bytes`, which answers in the `bytes` form
//! torch rebuilds with one copy, against a Python echo doing
//! `pickle.loads` and `pickle.dumps`, and the ratio of the two.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{ChildStdout, Command, Stdio};
use std::time::Duration;

use tensorshare::connection::Address;
use tensorshare::connection::Listener;
use tensorshare::connection::{AUTHKEY_ENV, ConnectionOptions};
use tensorshare::{Authkey, Connection, SharingContext, StrategyKind};
use tensorshare_cli::error::CliError;
use tensorshare_cli::format;
use tensorshare_cli::peer::Peer;

use crate::median::median;
use crate::rust_consumer;
use crate::spinner::spinner;
use crate::stream_protocol::{Framing, Workload, consume, produce};
use crate::streams::route::{Route, workload_for};
use crate::tensorshare_exe::tensorshare_exe;
use crate::torch_peer::TorchPeer;

/// Who produces and who consumes over TCP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TcpRoute {
    TorchToTorch,
    RustToRust,
    RustToTorch,
    TorchToRust,
}

impl TcpRoute {
    const ALL: [TcpRoute; 4] = [
        TcpRoute::TorchToTorch,
        TcpRoute::RustToRust,
        TcpRoute::RustToTorch,
        TcpRoute::TorchToRust,
    ];

    fn label(self) -> &'static str {
        match self {
            TcpRoute::TorchToTorch => "torch -> torch  pickle",
            TcpRoute::RustToRust => "Rust  -> Rust   bytes",
            TcpRoute::RustToTorch => "Rust  -> torch  bytes",
            TcpRoute::TorchToRust => "torch -> Rust   pickle (bytes)",
        }
    }
}

/// Where and how the listening end of every path listens.
pub struct TcpLink<'a> {
    pub torch: &'a TorchPeer,
    /// Where the listening end binds; port 0 for a free one.
    pub address: Address,
    /// TCP_NODELAY on tensorshare's ends (torch's stay as CPython leaves
    /// them: off).
    pub nodelay: bool,
    /// Words before every connecting peer's command (`ip netns exec NS`).
    pub wrapper: Vec<String>,
}

/// Times every path and the round trips at each of `sizes` and prints
/// the tables.
pub fn run(
    link: &TcpLink<'_>,
    sizes: &[usize],
    rounds: usize,
    quick: bool,
) -> Result<(), CliError> {
    // Found before anything is timed: the echo rows need it.
    let tensorshare = tensorshare_exe()?;
    println!(
        "tensorshare bench: bytes over TCP at {} (TCP_NODELAY {} on tensorshare's ends); uint8 \
         tensors streamed one way, the producer writing every byte; median of {rounds} rounds\n",
        link.address,
        if link.nodelay { "on" } else { "off" },
    );
    println!(
        "{:<9} {:<32} {:>7} {:>12} {:>8} {:>16}",
        "size", "path", "tensors", "per tensor", "GB/s", "vs torch pickle"
    );
    let spinner = spinner();
    for &size in sizes {
        let workload = workload_for(Route::RustToRustBytes, size, rounds, quick, u64::MAX);
        let mut rows = Vec::new();
        let size_text = format::bytes(size as u64);
        for route in TcpRoute::ALL {
            spinner.set_message(format!("{size_text} {} over TCP", route.label()));
            let seconds = link.run_route(route, workload)?;
            rows.push((route, median(seconds) / workload.count as f64));
        }
        spinner.suspend(|| print_rows(&rows, size, workload.count));
        let mut trips = Vec::new();
        for server in [EchoServer::Python, EchoServer::Tensorshare] {
            spinner.set_message(format!(
                "{size_text} round trips through {}",
                server.label()
            ));
            let seconds = link.echo_round_trips(server, &tensorshare, size, workload)?;
            trips.push((server, median(seconds)));
        }
        spinner.suspend(|| print_round_trips(&trips, size, workload.rounds));
    }
    spinner.finish_and_clear();
    Ok(())
}

/// The echo server a torch client's round trips go through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum EchoServer {
    /// `bench_peer.py echo`: `pickle.loads`, then `pickle.dumps`.
    Python,
    /// `tensorshare echo --strategy bytes`.
    Tensorshare,
}

impl EchoServer {
    fn label(self) -> &'static str {
        match self {
            EchoServer::Python => "torch -> Python echo -> torch",
            EchoServer::Tensorshare => "torch -> tensorshare echo -> torch",
        }
    }
}

fn print_round_trips(trips: &[(EchoServer, f64)], size: usize, rounds: usize) {
    let python = trips
        .iter()
        .find(|(server, _)| *server == EchoServer::Python)
        .map(|(_, seconds)| *seconds);
    for &(server, seconds) in trips {
        let ratio = python.map_or_else(|| "-".into(), |p| format!("{:.2}x", p / seconds));
        println!(
            "{:<9} {:<36} {:>7} {:>12} {:>16}",
            format::bytes(size as u64),
            server.label(),
            rounds,
            format::duration(seconds),
            ratio,
        );
    }
    println!(
        "{:>9} (round trips: median per round trip; ratio to the Python echo)\n",
        ""
    );
}

/// The address a listening peer printed first, as `listening ADDRESS`.
fn listening_address(stdout: &mut BufReader<ChildStdout>, who: &str) -> Result<String, String> {
    let mut line = String::new();
    stdout
        .read_line(&mut line)
        .map_err(|e| format!("reading where {who} listens: {e}"))?;
    line.trim_end()
        .strip_prefix("listening ")
        .map(str::to_owned)
        .ok_or_else(|| format!("{who} said {line:?} instead of where it listens"))
}

/// The torch peer's arguments for a producer pickling plain tensors.
const TORCH_PRODUCES_BYTES: [&str; 3] = ["produce", "--strategy", "bytes"];

fn print_rows(rows: &[(TcpRoute, f64)], size: usize, count: usize) {
    let torch = rows
        .iter()
        .find(|(route, _)| *route == TcpRoute::TorchToTorch)
        .map(|(_, per_tensor)| *per_tensor);
    for &(route, per_tensor) in rows {
        let ratio = torch.map_or_else(|| "-".into(), |t| format!("{:.2}x", t / per_tensor));
        println!(
            "{:<9} {:<32} {:>7} {:>12} {:>8.2} {:>16}",
            format::bytes(size as u64),
            route.label(),
            count,
            format::duration(per_tensor),
            size as f64 / per_tensor / 1e9,
            ratio,
        );
    }
    println!();
}

impl TcpLink<'_> {
    /// Seconds per timed round trip of the torch client through `server`,
    /// which listens at the link's address (`tensorshare echo` runs the
    /// command at `tensorshare`).
    fn echo_round_trips(
        &self,
        server: EchoServer,
        tensorshare: &Path,
        size: usize,
        workload: Workload,
    ) -> Result<Vec<f64>, CliError> {
        let authkey = Authkey::random()?;
        let address = self.address.to_string();
        let mut command = match server {
            EchoServer::Python => self
                .torch
                .command(&["echo"], None, Some((&address, &authkey))),
            EchoServer::Tensorshare => {
                let mut command = Command::new(tensorshare);
                command
                    .args(["echo", "--listen", &address, "--strategy", "bytes"])
                    .env(AUTHKEY_ENV, authkey.to_hex())
                    .stdin(Stdio::null())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::null());
                command
            }
        };
        let mut echo = Peer::spawn(&mut command).map_err(|e| format!("starting an echo: {e}"))?;
        let stdout = echo.take_stdout().ok_or("the echo server has no stdout")?;
        // Kept until the echo is done: the Python one prints its result at the end.
        let mut echo_stdout = BufReader::new(stdout);
        let bound = listening_address(&mut echo_stdout, server.label())?;
        let trips = Workload {
            size,
            count: 1,
            rounds: workload.rounds,
            warmup: workload.warmup.min(2),
        };
        let mut client = self.torch.command(
            &["round-trip", "--strategy", "bytes"],
            Some(trips),
            Some((&bound, &authkey)),
        );
        let output = self.spawn(&mut client)?.finish()?;
        if server == EchoServer::Python {
            echo.finish()?;
        }
        // tensorshare's echo serves on until it is stopped: dropping it
        // kills it, and a `bytes` echo holds nothing a kill leaves behind.
        drop(echo);
        drop(echo_stdout);
        self.torch.seconds(output)
    }

    fn options(&self) -> ConnectionOptions {
        ConnectionOptions::default().with_tcp_nodelay(self.nodelay)
    }

    /// This program's Rust consumer, connecting to `address`.
    fn rust_peer(&self, address: &str, authkey: &Authkey) -> Result<Command, CliError> {
        let mut command = Peer::self_command(rust_consumer::SUBCOMMAND, address, authkey, &[])
            .map_err(|e| format!("finding this program: {e}"))?;
        command.stdout(Stdio::piped()).stderr(Stdio::piped());
        if self.nodelay {
            command.arg("--tcp-nodelay");
        }
        Ok(command)
    }

    /// Starts a connecting peer's `command`, behind the wrapper if any.
    fn spawn(&self, command: &mut Command) -> Result<Peer, String> {
        let Some((program, words)) = self.wrapper.split_first() else {
            return Peer::spawn(command).map_err(|e| format!("starting a peer: {e}"));
        };
        let mut wrapped = Command::new(program);
        wrapped
            .args(words)
            .arg(command.get_program())
            .args(command.get_args())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (key, value) in command.get_envs() {
            match value {
                Some(value) => wrapped.env(key, value),
                None => wrapped.env_remove(key),
            };
        }
        Peer::spawn(&mut wrapped).map_err(|e| format!("starting {program} for a peer: {e}"))
    }

    /// Seconds per round of `route`.
    fn run_route(&self, route: TcpRoute, workload: Workload) -> Result<Vec<f64>, CliError> {
        let authkey = Authkey::random()?;
        if route == TcpRoute::TorchToTorch {
            return self.torch_to_torch(workload, &authkey);
        }
        let sharing = SharingContext::new(authkey.clone()).with_strategy(StrategyKind::Bytes);
        let listener = Listener::bind(&self.address, &authkey, self.options())?;
        let address = listener.address().to_string();
        let connect = Some((address.as_str(), &authkey));
        let mut command = match route {
            TcpRoute::RustToTorch => self.torch.command(&["consume"], None, connect),
            TcpRoute::TorchToRust => {
                self.torch
                    .command(&TORCH_PRODUCES_BYTES, Some(workload), connect)
            }
            _ => self.rust_peer(&address, &authkey)?,
        };
        let mut peer = self.spawn(&mut command)?;
        let mut connection = Connection::new(peer.accept(&listener)?, &sharing)?;
        if route == TcpRoute::TorchToRust {
            consume(&mut connection, Framing::Pickled)?;
            return self.torch.seconds(peer.finish()?);
        }
        let rounds = produce(&mut connection, &sharing, workload, Framing::Pickled)?;
        peer.finish()?;
        Ok(rounds.iter().map(Duration::as_secs_f64).collect())
    }

    /// torch's consumer listening at the link's address, torch's producer
    /// pickling into it.
    fn torch_to_torch(&self, workload: Workload, authkey: &Authkey) -> Result<Vec<f64>, CliError> {
        let address = self.address.to_string();
        let listen = Some((address.as_str(), authkey));
        let mut consumer = self.torch.spawn(&["consume", "--listen"], None, listen)?;
        let stdout = consumer
            .take_stdout()
            .ok_or("the torch consumer has no stdout")?;
        // Kept until the consumer is done: it prints its result at the end.
        let mut consumer_stdout = BufReader::new(stdout);
        let mut line = String::new();
        consumer_stdout
            .read_line(&mut line)
            .map_err(|e| format!("reading the torch consumer's address: {e}"))?;
        let Some(bound) = line.trim_end().strip_prefix("listening ") else {
            let said = format!("the torch consumer said {line:?} instead of where it listens");
            return Err(consumer.finish().err().unwrap_or(said).into());
        };
        let connect = Some((bound, authkey));
        let mut produce = self
            .torch
            .command(&TORCH_PRODUCES_BYTES, Some(workload), connect);
        let producer = self.spawn(&mut produce)?.finish()?;
        consumer.finish()?;
        drop(consumer_stdout);
        self.torch.seconds(producer)
    }
}
