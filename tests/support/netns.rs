//! Two hosts on one machine: a pair of Linux network namespaces joined by
//! a veth pair, for the tests across hosts.
//!
//! Each [`Host`] has its own network (`lo` and one end of the veth, with
//! an IPv4 and an IPv6 address) and its own `/dev/shm` and temporary
//! directory (fresh tmpfs mounts in a mount namespace of its own), so that
//! nothing shared through the file system crosses from one host to the
//! other: a `file_system` segment or a resource sharer's socket path sent
//! across is as absent on the other side as on another machine. Processes
//! run on a host as real children ([`Host::command`]: `nsenter` into the
//! namespaces of the host's holder process); a thread of the test can
//! join a host's network alone ([`Host::run_on`], `setns`).
//!
//! Making namespaces needs root (`CAP_SYS_ADMIN` and `CAP_NET_ADMIN`) and
//! iproute2's `ip`. Where they cannot be made, [`HostPair::create`] skips
//! the test with a loud notice, or fails it under
//! `TENSORSHARE_REQUIRE_NETNS=1`, which `scripts/test` sets when it runs
//! where they can.
//!
//! Everything is removed on drop, also while a failed test unwinds. A test
//! process killed outright leaves its namespaces behind, named
//! `tensorshare-net-<pid>-<start time>-...`; the next [`HostPair::create`]
//! on the machine removes those whose creator is gone, with the processes
//! still inside them.

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

/// What every namespace this harness makes is named by, so that a later
/// run finds the ones a killed test process left.
const NAME_PREFIX: &str = "tensorshare-net-";

/// The veth end's name in each namespace. The two ends are made straight
/// into their namespaces, so the name never exists on the machine itself.
const LINK: &str = "veth-ts";

/// The two hosts' addresses. Each namespace holds nothing but `lo` and its
/// end of the veth, so these clash with no network of the machine or of
/// another pair made at the same time.
const IPV4: [Ipv4Addr; 2] = [Ipv4Addr::new(10, 213, 0, 1), Ipv4Addr::new(10, 213, 0, 2)];
const IPV4_PREFIX: u8 = 30;
const IPV6: [Ipv6Addr; 2] = [
    Ipv6Addr::new(0xfd74, 0x7368, 0x6172, 0x6500, 0, 0, 0, 1),
    Ipv6Addr::new(0xfd74, 0x7368, 0x6172, 0x6500, 0, 0, 0, 2),
];
const IPV6_PREFIX: u8 = 64;

/// Where `ip netns` keeps its namespaces' bind mounts.
const NETNS_DIR: &str = "/run/netns";

/// What the holder of a host's mount namespace runs: a fresh tmpfs on
/// `/dev/shm`, `/tmp` and `$TMPDIR` (made again inside `/tmp` when it lies
/// there), `ready` once done, then nothing until its stdin closes, which
/// is when the test drops the host or dies.
///
/// A checkout in `/tmp` stays in sight where it was: the processes run on
/// the host are its binaries and its scripts. The new `/tmp` is made on
/// `/dev/shm` first, the checkout bound into it while the old `/tmp` is
/// still there to bind from (a mount cannot be bound from another
/// namespace's), and then moved to `/tmp`; `/dev/shm` gets a tmpfs of its
/// own after.
const HOLDER_SCRIPT: &str = r#"set -e
mount -t tmpfs -o mode=1777 tensorshare-host /dev/shm
case "$TENSORSHARE_CHECKOUT" in
    /tmp/*)
        inside="/dev/shm/${TENSORSHARE_CHECKOUT#/tmp/}"
        mkdir -p "$inside"
        mount --bind "$TENSORSHARE_CHECKOUT" "$inside"
        ;;
esac
mount --move /dev/shm /tmp
mount -t tmpfs -o mode=1777 tensorshare-host /dev/shm
if [ -n "${TMPDIR:-}" ]; then
    case "$TMPDIR" in
        /tmp/*) mkdir -p "$TMPDIR" ;;
        *) mkdir -p "$TMPDIR" && mount -t tmpfs -o mode=1777 tensorshare-host "$TMPDIR" ;;
    esac
fi
echo ready
exec cat >/dev/null
"#;

/// Two hosts joined by a veth pair, removed with everything in them on
/// drop.
pub struct HostPair {
    hosts: [Host; 2],
}

/// One network namespace of a [`HostPair`], with its own `/dev/shm` and
/// temporary directory.
pub struct Host {
    name: String,
    ipv4: Ipv4Addr,
    ipv6: Ipv6Addr,
    /// The process whose mount namespace is the host's; it lives, reading
    /// its stdin, as long as the host.
    holder: Option<(Child, ChildStdin)>,
}

/// Whether the tests across hosts must run (`scripts/test` as root)
/// rather than skip.
pub fn netns_required() -> bool {
    std::env::var("TENSORSHARE_REQUIRE_NETNS").as_deref() == Ok("1")
}

/// Whether this process may make mount and pid namespaces of its own
/// (`unshare`, as root), for a test that mounts its own `/dev/shm` or
/// `/proc`; `false` after a loud notice naming `test` where it may not and
/// none is required, and a failure under `TENSORSHARE_REQUIRE_NETNS=1`.
pub fn mount_namespaces(test: &str) -> bool {
    let probe = std::process::Command::new("unshare")
        .args(["--mount", "--pid", "--fork", "--mount-proc", "true"])
        .output()
        .expect("unshare runs");
    if probe.status.success() {
        return true;
    }
    let reason = String::from_utf8_lossy(&probe.stderr);
    assert!(
        !netns_required(),
        "{test}: TENSORSHARE_REQUIRE_NETNS=1 but no mount namespace can be made: {reason}"
    );
    // Through the handle, not eprintln!, so that test capture does not hide it.
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED: {test} needs mount namespaces ({reason}): run as root"
    );
    false
}

/// What a test across hosts with torch starts from: the test Python, two
/// hosts, a fresh authkey, and its turn. The tests of a binary that hold
/// one run one at a time: each starts torch processes on a machine of few
/// cores, one moves 3 GiB each way, and some count this process's fds.
/// Under cargo nextest each test is a process of its own, which counts
/// only its own fds; `.config/nextest.toml` keeps the 3 GiB test apart
/// from the other test that holds gigabytes.
pub struct TorchAcrossHosts {
    pub python: String,
    pub pair: HostPair,
    pub authkey: tensorshare::Authkey,
    /// Released last, once the hosts are gone.
    _turn: std::sync::MutexGuard<'static, ()>,
}

impl TorchAcrossHosts {
    /// Waits for this test's turn, then finds the test Python and makes
    /// two hosts; `None` after a notice where either cannot be had.
    pub fn set_up(test: &str) -> Option<TorchAcrossHosts> {
        static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let turn = TURN
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let python = super::test_python(test)?;
        Some(TorchAcrossHosts {
            python,
            pair: HostPair::create(test)?,
            authkey: tensorshare::Authkey::random().expect("a random authkey"),
            _turn: turn,
        })
    }
}

impl HostPair {
    /// Makes two hosts joined by a veth pair, links up, `lo` up in each;
    /// or `None` after a loud notice where namespaces cannot be made
    /// (failing instead under `TENSORSHARE_REQUIRE_NETNS=1`). `test` names
    /// the test in the notice.
    pub fn create(test: &str) -> Option<HostPair> {
        sweep_abandoned();
        let names = fresh_names();
        if let Err(reason) = add_namespace(&names[0]) {
            assert!(
                !netns_required(),
                "{test}: TENSORSHARE_REQUIRE_NETNS=1 but no network namespace can be made: {reason}"
            );
            // Through the handle, not eprintln!, so that test capture does not hide it.
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED: {test} needs network namespaces ({reason}): run as root \
                 with iproute2 installed (scripts/test does when it runs as root)"
            );
            return None;
        }
        let mut pair = HostPair {
            hosts: [0, 1].map(|i| Host {
                name: names[i].clone(),
                ipv4: IPV4[i],
                ipv6: IPV6[i],
                holder: None,
            }),
        };
        // From here every failure is a broken machine or harness, not a
        // missing permission: it fails the test, and the drop of `pair`
        // removes what was made.
        add_namespace(&names[1]).unwrap_or_else(|reason| panic!("{reason}"));
        ip(&[
            "link", "add", "name", LINK, "netns", &names[0], "type", "veth", "peer", "name", LINK,
            "netns", &names[1],
        ]);
        for host in &mut pair.hosts {
            host.configure();
        }
        Some(pair)
    }

    /// The two hosts.
    pub fn hosts(&self) -> (&Host, &Host) {
        (&self.hosts[0], &self.hosts[1])
    }

    /// Takes `host`'s end of the veth down: from then on nothing passes
    /// between the hosts, and neither side is told, as when a machine
    /// loses its network.
    pub fn take_link_down(&self, host: &Host) {
        ip(&["-n", &host.name, "link", "set", "dev", LINK, "down"]);
    }

    /// Limits what `host` sends over the veth to `rate` (`tc` syntax, e.g.
    /// `80mbit`): a large message then stays in flight for seconds.
    pub fn limit_rate(&self, host: &Host, rate: &str) {
        let args = [
            "-n", &host.name, "qdisc", "add", "dev", LINK, "root", "tbf", "rate",
        ];
        let output = Command::new("tc")
            .args(args)
            .args([rate, "burst", "64kb", "latency", "400ms"])
            .output()
            .unwrap_or_else(|e| panic!("cannot run `tc` (iproute2): {e}"));
        assert!(
            output.status.success(),
            "`tc {} {rate} ...` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
}

impl Drop for HostPair {
    fn drop(&mut self) {
        for host in &mut self.hosts {
            host.remove();
        }
    }
}

impl Host {
    /// The namespace's name, as `ip netns list` shows it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The host's IPv4 address on the veth.
    pub fn ipv4(&self) -> IpAddr {
        IpAddr::V4(self.ipv4)
    }

    /// The host's IPv6 address on the veth (unique local).
    pub fn ipv6(&self) -> IpAddr {
        IpAddr::V6(self.ipv6)
    }

    /// `program` run on this host, in its network and its mounts, in the
    /// test's working directory; set its arguments and pipes as for any
    /// `Command`.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let (holder, _) = self.holder.as_ref().expect("a host has a holder once made");
        let mut command = Command::new("nsenter");
        command
            .arg(format!("--target={}", holder.id()))
            .args(["--net", "--mount"])
            .arg(format!(
                "--wd={}",
                std::env::current_dir()
                    .expect("the working directory")
                    .display()
            ))
            .arg("--")
            .arg(program);
        command
    }

    /// Runs `work` on a thread of this process that has joined this host's
    /// network (not its mounts: a thread cannot leave the process's), and
    /// returns what it returns. The sockets it makes stay in this host's
    /// network after it returns.
    pub fn run_on<T: Send>(&self, work: impl FnOnce() -> T + Send) -> T {
        let namespace = File::open(format!("{NETNS_DIR}/{}", self.name))
            .unwrap_or_else(|e| panic!("open the namespace {}: {e}", self.name));
        std::thread::scope(|scope| {
            scope
                .spawn(move || {
                    nix::sched::setns(&namespace, nix::sched::CloneFlags::CLONE_NEWNET)
                        .unwrap_or_else(|e| panic!("join the network of {}: {e}", self.name));
                    work()
                })
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        })
    }

    /// Gives the host its addresses, brings its links up and starts the
    /// holder of its mounts.
    fn configure(&mut self) {
        let name = self.name.clone();
        let ipv4 = format!("{}/{IPV4_PREFIX}", self.ipv4);
        let ipv6 = format!("{}/{IPV6_PREFIX}", self.ipv6);
        ip(&["-n", &name, "addr", "add", &ipv4, "dev", LINK]);
        // Without duplicate address detection the address is usable at
        // once instead of after a second or two of probing.
        ip(&[
            "-n", &name, "-6", "addr", "add", &ipv6, "dev", LINK, "nodad",
        ]);
        ip(&["-n", &name, "link", "set", "dev", "lo", "up"]);
        ip(&["-n", &name, "link", "set", "dev", LINK, "up"]);
        let mut child = Command::new("ip")
            .args(["netns", "exec", &name])
            .args(["unshare", "--mount", "--propagation", "slave"])
            .args(["sh", "-c", HOLDER_SCRIPT])
            .env("TENSORSHARE_CHECKOUT", env!("CARGO_MANIFEST_DIR"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("start the holder of {name}'s mounts: {e}"));
        let stdin = child.stdin.take().expect("piped stdin");
        let mut line = String::new();
        let _ = BufReader::new(child.stdout.take().expect("piped stdout")).read_line(&mut line);
        self.holder = Some((child, stdin));
        assert_eq!(
            line.trim_end(),
            "ready",
            "the holder of {name}'s mounts did not start: its error is above"
        );
    }

    /// Ends every process on the host, the holder last, then removes the
    /// namespace and with it its end of the veth (the other end goes with
    /// it).
    fn remove(&mut self) {
        kill_processes_in(&self.name);
        if let Some((mut holder, stdin)) = self.holder.take() {
            drop(stdin);
            let _ = holder.kill();
            let _ = holder.wait();
        }
        // A drop must not panic while a failed test unwinds: what could
        // not be removed is reported, and the next run sweeps it.
        if let Err(e) = run_ip(&["netns", "delete", &self.name]) {
            let _ = writeln!(std::io::stderr(), "cannot remove {}: {e}", self.name);
        }
    }
}

/// Two namespace names no other pair has: this process's pid and start
/// time, which together no other process has had, and a counter.
fn fresh_names() -> [String; 2] {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let pid = std::process::id();
    let start = start_time(pid).expect("this process's start time");
    [0, 1].map(|i| format!("{NAME_PREFIX}{pid}-{start}-{n}-{i}"))
}

/// `pid`'s start time in clock ticks after boot (field 22 of
/// `/proc/PID/stat`), or `None` once it is gone.
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ...`: the fields after the command's closing
    // parenthesis start at the third.
    let (_, fields) = stat.rsplit_once(')')?;
    fields.split_whitespace().nth(19)?.parse().ok()
}

/// Removes the namespaces of this harness whose creating process is gone
/// (killed before it could drop them), with the processes inside them.
fn sweep_abandoned() {
    let Ok(listing) = run_ip(&["netns", "list"]) else {
        return;
    };
    for name in listing
        .lines()
        .filter_map(|line| line.split_whitespace().next())
    {
        let Some(creator) = name.strip_prefix(NAME_PREFIX) else {
            continue;
        };
        let mut fields = creator.split('-');
        let (Some(Ok(pid)), Some(Ok(start))) = (
            fields.next().map(str::parse::<u32>),
            fields.next().map(str::parse::<u64>),
        ) else {
            continue;
        };
        if start_time(pid) != Some(start) {
            kill_processes_in(name);
            // Another test process may be sweeping the same name.
            let _ = run_ip(&["netns", "delete", name]);
        }
    }
}

/// Kills every process in the network namespace `name` (all of them
/// started there by the test that made it) and waits for them to go.
fn kill_processes_in(name: &str) {
    let Ok(pids) = run_ip(&["netns", "pids", name]) else {
        return;
    };
    let pids: Vec<&str> = pids.split_whitespace().collect();
    if pids.is_empty() {
        return;
    }
    let _ = Command::new("kill")
        .arg("-KILL")
        .args(&pids)
        .stderr(Stdio::null())
        .status();
    super::wait_until(std::time::Duration::from_secs(10), || {
        pids.iter()
            .all(|pid| pid.parse().map_or(true, super::has_exited))
    });
}

/// Makes the namespace `name`, or says why it cannot be made.
fn add_namespace(name: &str) -> Result<(), String> {
    run_ip(&["netns", "add", name]).map(drop)
}

/// Runs `ip ARGS`, failing the test if it fails.
fn ip(args: &[&str]) {
    if let Err(e) = run_ip(args) {
        panic!("{e}");
    }
}

/// Runs `ip ARGS`: its stdout, or what went wrong.
fn run_ip(args: &[&str]) -> Result<String, String> {
    let output: Output = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run `ip` (iproute2): {e}"))?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(format!(
            "`ip {}` failed ({}): {}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}
