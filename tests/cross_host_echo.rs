//! `tensorshare echo` on one host serving peers on another, across a veth
//! pair (`support/netns.rs`): stock torch clients with nothing but
//! `multiprocessing.connection.Client` (`compat/python/tcp_peer.py drive`:
//! every dtype and view, a wrong authkey, torch's shared-memory handles
//! refused), a Rust client over IPv6, and a torch client that vanishes
//! mid-message.

mod support;

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::Duration;

use support::netns::{Host, HostPair, TorchAcrossHosts};
use support::{
    ChildGuard, Server, cases, eventually, expect_success, open_fds, output_within, python_script,
    tensorshare_exe,
};
use tensorshare::{Authkey, SharingContext};

/// How long a torch driver may take for all its cases.
const DRIVE_LIMIT: Duration = Duration::from_secs(120);

/// `tensorshare echo` on `host` at `ip`, port chosen by the system,
/// serving other hosts.
fn echo_on(host: &Host, ip: std::net::IpAddr, authkey: &Authkey) -> Server {
    let mut echo = host.command(tensorshare_exe());
    echo.args(["echo", "--allow-remote", "--listen"])
        .arg(SocketAddr::new(ip, 0).to_string())
        .args(["--authkey", &authkey.to_hex()])
        .env_remove(tensorshare::connection::AUTHKEY_ENV);
    Server::start_reporting(echo)
}

#[test]
fn a_torch_client_on_another_host_echoes_every_case_through_tensorshare_echo() {
    let Some(setup) = TorchAcrossHosts::set_up(
        "a_torch_client_on_another_host_echoes_every_case_through_tensorshare_echo",
    ) else {
        return;
    };
    let (python, pair, authkey) = (&setup.python, &setup.pair, &setup.authkey);
    let (echo_host, torch_host) = pair.hosts();
    let mut echo = echo_on(echo_host, echo_host.ipv4(), authkey);
    let output = output_within(
        torch_host
            .command(python)
            .arg(python_script("tcp_peer.py"))
            .args(["drive", "--address", &echo.address.to_string()])
            .args(["--authkey", &authkey.to_hex()]),
        DRIVE_LIMIT,
    );
    let report = expect_success(&output, "tcp_peer.py drive across hosts");
    assert!(report.contains(" cases passed, 0 failed"), "{report}");
    for case in ["dtype_float32", "view_channels_last", "wrong_authkey"] {
        assert!(report.contains(&format!("ok {case}\n")), "{report}");
    }
    let log = echo.stop_and_read_stderr();
    // The wrong authkey, named by its host on echo's side too.
    let refused = format!("({}:", torch_host.ipv4());
    assert!(
        log.lines().any(|line| line.contains(&refused)
            && line.contains("authentication failed: the authkeys differ")),
        "no refused handshake from {} in: {log}",
        torch_host.ipv4()
    );
    // The torch client's `conn.send(tensor)`, a handle to its shared
    // memory, refused once per strategy, each naming the torch host.
    for form in ["rebuild_storage_fd", "rebuild_storage_filename"] {
        let refusal = format!(
            "{form} arrived over a TCP connection from {}:",
            torch_host.ipv4()
        );
        assert!(log.contains(&refusal), "no `{refusal}` in: {log}");
    }
    assert!(log.contains("shared memory does not cross hosts"), "{log}");
    assert!(
        log.contains("authenticated with the authkey but not encrypted"),
        "{log}"
    );
}

#[test]
fn a_rust_client_on_another_host_echoes_every_case_over_ipv6() {
    // Rust at both ends: no Python, and no need to wait for a turn.
    let Some(pair) = HostPair::create("a_rust_client_on_another_host_echoes_every_case_over_ipv6")
    else {
        return;
    };
    let (echo_host, client_host) = pair.hosts();
    let authkey = Authkey::random().expect("a key");
    let echo = echo_on(echo_host, echo_host.ipv6(), &authkey);
    let address = echo.address.clone();
    assert!(address.to_string().starts_with('['), "{address}");
    let failures = client_host.run_on(|| {
        let sharing = SharingContext::new(authkey.clone());
        let mut connection = sharing
            .connect(&address)
            .unwrap_or_else(|e| panic!("connect to {address}: {e}"));
        cases::echo_failures(&mut connection)
    });
    assert!(failures.is_empty(), "echoes differ: {failures:#?}");
}

#[test]
fn echo_serves_on_after_a_torch_client_vanishes_mid_message() {
    let Some(setup) =
        TorchAcrossHosts::set_up("echo_serves_on_after_a_torch_client_vanishes_mid_message")
    else {
        return;
    };
    let (python, pair, authkey) = (&setup.python, &setup.pair, &setup.authkey);
    let (echo_host, torch_host) = pair.hosts();
    let echo = echo_on(echo_host, echo_host.ipv4(), authkey);
    let fds_before = open_fds(echo.pid());
    // 64 MiB at 80 Mbit/s: nearly 7 s in flight.
    pair.limit_rate(torch_host, "80mbit");
    let mut torch = ChildGuard(
        torch_host
            .command(python)
            .arg(python_script("cross_host_peer.py"))
            .args([
                "send-large",
                "--connect",
                "--nbytes",
                &(64 << 20).to_string(),
            ])
            .args(["--address", &echo.address.to_string()])
            .args(["--authkey", &authkey.to_hex()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("start the torch client"),
    );
    eventually("echo has the torch client's connection", || {
        open_fds(echo.pid()) > fds_before
    });
    std::thread::sleep(Duration::from_secs(1));
    pair.take_link_down(torch_host);
    let _ = torch.0.kill();
    let _ = torch.0.wait();

    // A client on the echo's own host, as the torch host is cut off: the
    // half-read message holds its connection's thread, not the listener.
    let address = echo.address.clone();
    let failures = echo_host.run_on(|| {
        let sharing = SharingContext::new(authkey.clone());
        let mut connection = sharing.connect(&address).unwrap_or_else(|e| {
            panic!("connect to {address} after the torch client vanished: {e}")
        });
        cases::echo_failures(&mut connection)
    });
    assert!(failures.is_empty(), "echoes differ: {failures:#?}");
}
