//! An async echo server on one tokio runtime (`tensorshare::tokio`),
//! against stock torch clients: many at once, one that vanishes in the
//! middle of a message, one with the wrong key, and a slow reader.

mod support;

use std::process::Command;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use tensorshare::connection::Address;
use tensorshare::{Authkey, SharingContext, StrategyKind};

use support::{python_script, test_python};

/// What happened to each connection the server accepted.
type Outcomes = Arc<Mutex<Vec<String>>>;

/// An echo server on a single-threaded runtime of its own thread, a task
/// per connection: a task that blocked the thread would stop every other.
/// It loops as the crate docs' tokio server does: the next peer after a
/// refused handshake, the next message after a refused one, the end at a
/// close. It runs until the test process ends.
fn start_server(sharing: SharingContext) -> (Address, Outcomes) {
    let outcomes = Outcomes::default();
    let recorded = Arc::clone(&outcomes);
    let (ready, address) = std::sync::mpsc::channel();
    thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        runtime.block_on(async move {
            let listener = sharing.listen_in_private_dir().expect("listening");
            let mut listener = tensorshare::tokio::Listener::new(listener).expect("registered");
            ready
                .send(listener.address().clone())
                .expect("the test waits");
            loop {
                let mut connection = match listener.accept().await {
                    Ok(connection) => connection,
                    Err(error) if error.is_handshake_failure() => {
                        recorded.lock().unwrap().push(format!("refused: {error}"));
                        continue;
                    }
                    Err(error) => panic!("accept: {error}"),
                };
                let recorded = Arc::clone(&recorded);
                tokio::spawn(async move {
                    let outcome = loop {
                        match connection.recv().await {
                            Ok(value) => {
                                if let Err(error) = connection.send(&value).await {
                                    break format!("send failed: {error}");
                                }
                            }
                            Err(error) if error.is_closed() => break "closed".to_owned(),
                            Err(error) if error.is_refused_message() => {
                                recorded
                                    .lock()
                                    .unwrap()
                                    .push(format!("refused message: {error}"));
                            }
                            Err(error) => break format!("receive failed: {error}"),
                        }
                    };
                    recorded.lock().unwrap().push(outcome);
                });
            }
        });
    });
    let address = address
        .recv_timeout(Duration::from_secs(30))
        .expect("the server listens");
    (address, outcomes)
}

fn clients_command(python: &str, address: &Address, authkey: &Authkey, mode: &str) -> Command {
    let mut command = Command::new(python);
    command
        .arg(python_script("async_clients.py"))
        .arg(mode)
        .args(["--address", &address.to_string()])
        .args(["--authkey", &authkey.to_hex()]);
    command
}

fn run(command: &mut Command) -> String {
    let output = support::output_within(command, Duration::from_secs(120));
    support::expect_success(&output, &format!("{command:?}"))
}

fn outcomes_of(outcomes: &Outcomes) -> Vec<String> {
    outcomes.lock().unwrap().clone()
}

#[test]
fn many_torch_clients_at_once_on_one_runtime() {
    let Some(python) = test_python("many_torch_clients_at_once_on_one_runtime") else {
        return;
    };
    let authkey = Authkey::random().expect("a key");
    let (address, outcomes) = start_server(SharingContext::new(authkey.clone()));
    let out = run(
        clients_command(&python, &address, &authkey, "clients").args([
            "--clients",
            "32",
            "--messages",
            "20",
        ]),
    );
    assert!(out.contains("ok 32 clients, 20 messages each"), "{out}");
    support::eventually("every connection ended cleanly", || {
        let outcomes = outcomes_of(&outcomes);
        outcomes.iter().filter(|o| *o == "closed").count() == 32
            && outcomes.iter().filter(|o| o.starts_with("refused")).count() == 1
    });
}

#[test]
fn a_client_gone_mid_message_and_a_wrong_key_leave_the_server_serving() {
    let Some(python) =
        test_python("a_client_gone_mid_message_and_a_wrong_key_leave_the_server_serving")
    else {
        return;
    };
    let authkey = Authkey::random().expect("a key");
    let (address, outcomes) = start_server(SharingContext::new(authkey.clone()));
    run(&mut clients_command(&python, &address, &authkey, "vanish"));
    support::eventually("the cut-short message is reported", || {
        outcomes_of(&outcomes)
            .iter()
            .any(|o| o.starts_with("receive failed") && o.contains("middle of a message"))
    });
    let out = run(
        clients_command(&python, &address, &authkey, "clients").args([
            "--clients",
            "4",
            "--messages",
            "5",
        ]),
    );
    assert!(out.contains("ok 4 clients"), "{out}");
}

/// A torch sender gone before its fd was fetched: its message is refused,
/// and the loop goes on to see the connection close, where a `while let
/// Ok(..)` loop would stop silently on the refusal.
#[test]
fn a_sender_that_exits_after_sending_is_reported_and_its_connection_ends_cleanly() {
    let Some(python) = test_python(
        "a_sender_that_exits_after_sending_is_reported_and_its_connection_ends_cleanly",
    ) else {
        return;
    };
    let authkey = Authkey::random().expect("a key");
    let (address, outcomes) = start_server(SharingContext::new(authkey.clone()));
    run(&mut clients_command(&python, &address, &authkey, "exits"));
    support::eventually("the refusal, then the close", || {
        let outcomes = outcomes_of(&outcomes);
        let refused = outcomes
            .iter()
            .position(|o| o.starts_with("refused message") && o.contains("cannot fetch"));
        let closed = outcomes.iter().position(|o| o == "closed");
        matches!((refused, closed), (Some(r), Some(c)) if r < c)
    });
}

#[test]
fn a_slow_reader_holds_up_no_other_client() {
    let Some(python) = test_python("a_slow_reader_holds_up_no_other_client") else {
        return;
    };
    let authkey = Authkey::random().expect("a key");
    // Echoes as bytes: the slow reader's 64 MiB comes back inline, far
    // more than its socket holds, so its task waits for room until the
    // reader is released, after the other clients are done.
    let sharing = SharingContext::new(authkey.clone()).with_strategy(StrategyKind::Bytes);
    let (address, outcomes) = start_server(sharing);
    let scratch = tempfile::tempdir().expect("a scratch directory");
    let release = scratch.path().join("release");
    let mut slow = clients_command(&python, &address, &authkey, "slow");
    slow.args(["--mib", "64", "--release"]).arg(&release);
    let (mut slow, first) = support::spawn_for_first_line(&mut slow, "the slow reader");
    assert_eq!(first, "sent");
    let out = run(
        clients_command(&python, &address, &authkey, "clients").args([
            "--clients",
            "8",
            "--messages",
            "10",
        ]),
    );
    assert!(out.contains("ok 8 clients"), "{out}");
    std::fs::write(&release, b"").expect("the slow reader released");
    let status = support::exit_within(&mut slow, Duration::from_secs(120)).expect("it finishes");
    let output = slow.wait_with_output().expect("its output");
    assert!(
        status.success(),
        "the slow reader: {status}\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    support::eventually("every connection ended cleanly", || {
        outcomes_of(&outcomes)
            .iter()
            .filter(|o| *o == "closed")
            .count()
            == 9
    });
}
