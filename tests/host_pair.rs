//! The two-host harness of the tests across hosts (`support/netns.rs`):
//! its hosts reach each other over the veth and nothing else, each has its
//! own `/dev/shm` and temporary directory, the link goes down on demand,
//! and nothing is left once a pair is dropped or its creator was killed.

mod support;

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use support::netns::{Host, HostPair};
use support::{ChildGuard, expect_success, has_exited, wait_until};

/// A listener on `host` at `ip` (port chosen by the system).
fn listen_on(host: &Host, ip: IpAddr) -> TcpListener {
    host.run_on(|| TcpListener::bind(SocketAddr::new(ip, 0)).expect("bind on the host"))
}

/// Connects from `host` to `address` and sends `text`.
fn send_from(host: &Host, address: SocketAddr, text: &str) -> std::io::Result<()> {
    host.run_on(|| {
        let mut stream = TcpStream::connect_timeout(&address, Duration::from_secs(5))?;
        stream.write_all(text.as_bytes())
    })
}

/// Accepts one connection on `listener` and reads it to the end.
fn receive(listener: &TcpListener) -> String {
    let (mut stream, _) = listener.accept().expect("accept");
    let mut text = String::new();
    stream.read_to_string(&mut text).expect("read");
    text
}

/// The names `ip netns list` shows.
fn namespaces() -> String {
    let output = Command::new("ip").args(["netns", "list"]).output();
    expect_success(&output.expect("run ip netns list"), "ip netns list")
}

#[test]
fn hosts_reach_each_other_over_the_veth_in_ipv4_and_ipv6() {
    let Some(pair) = HostPair::create("hosts_reach_each_other_over_the_veth_in_ipv4_and_ipv6")
    else {
        return;
    };
    let (first, second) = pair.hosts();
    for ip in [first.ipv4(), first.ipv6()] {
        let listener = listen_on(first, ip);
        let address = listener.local_addr().expect("local address");
        send_from(second, address, "from a thread").expect("connect across the veth");
        assert_eq!(receive(&listener), "from a thread");
    }

    // And from a child process started on the second host.
    let listener = listen_on(first, first.ipv4());
    let address = listener.local_addr().expect("local address");
    let output = second
        .command("bash")
        .args(["-c", "echo -n from a child >/dev/tcp/\"$0\"/\"$1\""])
        .args([address.ip().to_string(), address.port().to_string()])
        .output()
        .expect("run bash on the second host");
    expect_success(&output, "a connection from the second host's child");
    assert_eq!(receive(&listener), "from a child");
}

#[test]
fn a_host_sees_its_own_loopback_only() {
    let Some(pair) = HostPair::create("a_host_sees_its_own_loopback_only") else {
        return;
    };
    let (first, second) = pair.hosts();
    let loopback = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let listener = listen_on(first, loopback);
    let address = listener.local_addr().expect("local address");
    let refused = send_from(second, address, "nothing").expect_err("reached the other's loopback");
    assert_eq!(refused.kind(), std::io::ErrorKind::ConnectionRefused);
    send_from(first, address, "own loopback").expect("connect on the first host's loopback");
    assert_eq!(receive(&listener), "own loopback");
}

#[test]
fn a_host_has_its_own_network_dev_shm_and_temporary_directory() {
    let Some(pair) = HostPair::create("a_host_has_its_own_network_dev_shm_and_temporary_directory")
    else {
        return;
    };
    let (first, second) = pair.hosts();
    let name = format!("tensorshare-host-probe-{}", std::process::id());
    let files = format!("/dev/shm/{name} ${{TMPDIR:-/tmp}}/{name}");
    let run = |host: &Host, script: &str| {
        host.command("sh")
            .args(["-c", script])
            .stdin(Stdio::null())
            .output()
            .expect("run sh on a host")
    };
    expect_success(
        &run(first, &format!("touch {files}")),
        "make files on the first host",
    );
    // A later process on the same host sees them; the other host and the
    // machine itself do not.
    expect_success(
        &run(first, &format!("ls {files}")),
        "the first host's files",
    );
    assert!(!run(second, &format!("ls {files}")).status.success());
    assert!(!Path::new("/dev/shm").join(&name).exists());
    assert!(!std::env::temp_dir().join(&name).exists());

    let inode = |path: &str| {
        std::fs::metadata(path)
            .map(|meta| std::os::unix::fs::MetadataExt::ino(&meta))
            .expect("stat a namespace")
    };
    let namespace = expect_success(
        &run(first, "readlink /proc/self/ns/net"),
        "the first host's network namespace",
    );
    assert_eq!(
        namespace.trim(),
        format!("net:[{}]", inode(&format!("/run/netns/{}", first.name())))
    );
}

#[test]
fn a_link_taken_down_carries_nothing() {
    let Some(pair) = HostPair::create("a_link_taken_down_carries_nothing") else {
        return;
    };
    let (first, second) = pair.hosts();
    let listener = listen_on(first, first.ipv4());
    let address = listener.local_addr().expect("local address");
    send_from(second, address, "before").expect("connect while the link is up");
    assert_eq!(receive(&listener), "before");
    pair.take_link_down(first);
    second
        .run_on(|| TcpStream::connect_timeout(&address, Duration::from_secs(1)))
        .expect_err("connected across a link that is down");
}

#[test]
fn a_dropped_pair_leaves_no_namespace_link_or_process() {
    let Some(pair) = HostPair::create("a_dropped_pair_leaves_no_namespace_link_or_process") else {
        return;
    };
    let (first, second) = pair.hosts();
    let names = [first.name().to_owned(), second.name().to_owned()];
    let mut sleeper = ChildGuard(
        second
            .command("sleep")
            .arg("1000")
            .spawn()
            .expect("start sleep on the second host"),
    );
    let listed = namespaces();
    assert!(names.iter().all(|name| listed.contains(name.as_str())));
    drop(pair);
    let listed = namespaces();
    assert!(
        names.iter().all(|name| !listed.contains(name.as_str())),
        "still listed after the drop: {listed}"
    );
    let pid = sleeper.pid();
    let _ = sleeper.0.wait();
    assert!(has_exited(pid), "a process on a dropped host still runs");
    let links = Command::new("ip").args(["-brief", "link"]).output();
    let links = expect_success(&links.expect("run ip link"), "ip link");
    assert!(
        !links.contains("veth-ts"),
        "a veth end left on the machine: {links}"
    );
}

#[test]
fn a_pair_left_by_a_killed_process_is_swept_by_the_next() {
    let test = "a_pair_left_by_a_killed_process_is_swept_by_the_next";
    let Some(pair) = HostPair::create(test) else {
        return;
    };
    drop(pair);
    // A shell makes a namespace named as the harness names its own, by
    // the shell's pid and start time, starts a process in it and exits:
    // a creator that is gone, whose host still runs something. The
    // process is inside before the name looks abandoned, so a sweep by
    // any test process running meanwhile finds it there.
    let made = Command::new("sh")
        .args([
            "-c",
            r#"start=$(cut -d' ' -f22 /proc/$$/stat)
name="tensorshare-net-$$-$start-0-0"
ip netns add "$name" || exit 1
ip netns exec "$name" sleep 1000 </dev/null >/dev/null 2>&1 &
while [ -z "$(ip netns pids "$name")" ]; do sleep 0.01; done
echo "$name $!""#,
        ])
        .stderr(Stdio::inherit())
        .output()
        .expect("run sh");
    expect_success(&made, "make an abandoned namespace");
    let made = String::from_utf8_lossy(&made.stdout);
    let (name, pid) = made
        .trim()
        .split_once(' ')
        .expect("the namespace's name and its process's pid");
    let pid: u32 = pid.parse().expect("a pid");
    let _pair = HostPair::create(test).expect("namespaces were made a moment ago");
    assert!(!namespaces().contains(name), "not swept");
    let killed = wait_until(Duration::from_secs(10), || has_exited(pid));
    if !killed {
        let _ = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
    }
    assert!(killed, "a process in the swept namespace still runs");
}
