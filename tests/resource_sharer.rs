//! The resource sharer as a program sees it: an fd registered for a
//! receiver that is killed before it fetches closes while its sender idles.
//! The sharer's server and client are tested beside them
//! (`src/resource_sharer/tests.rs`).

mod support;

use std::time::{Duration, Instant};

use support::test_python;

/// A receiver killed before it fetched, its sender living on and idle,
/// the connection still open: the fd registered for it closes within
/// seconds, not at the end of its 5-minute unfetched lifetime, and the
/// sender has nothing left to wait for.
#[test]
fn an_fd_sent_to_a_receiver_killed_unfetched_closes_while_its_sender_idles() {
    let Some(python) = test_python("an_fd_sent_to_a_receiver_killed_unfetched") else {
        return;
    };
    let authkey = tensorshare::Authkey::random().expect("an authkey");
    let sharing = tensorshare::SharingContext::new(authkey)
        .with_strategy(tensorshare::StrategyKind::FileDescriptor);
    let (mut unread, message) = support::UnreadMessage::send(&python, &sharing);
    drop(message);
    unread.kill_receiver();
    let started = Instant::now();
    sharing
        .wait_until_fetched(Duration::from_secs(20))
        .expect("the registration withdrawn once its receiver exited");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "waited {:?} for a receiver that is gone",
        started.elapsed()
    );
    drop(unread);
}
