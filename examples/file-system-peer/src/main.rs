//! A Rust peer of a torch process under the `file_system` strategy, with
//! nothing installed but this program: each float32 tensor torch sends is
//! answered with a new tensor, twice its values, in shared memory of this
//! program's; `None` ends it.
//!
//! Under `file_system` every segment is registered with a shared-memory
//! manager, a daemon that outlives this program and unlinks its segments
//! if it is killed. The crate runs that daemon from this program's own
//! executable, before `main`, so no `tensorshare` command is needed.
//!
//! `peer.py` (stock torch) starts it with its authkey in
//! `TENSORSHARE_AUTHKEY`, connects to the address it prints, trades
//! tensors, then kills it and checks that its manager cleans up:
//! `python examples/file-system-peer/peer.py`. Given a file as its
//! argument, the program appends its pid to it first thing, so that the
//! torch side can tell `main` ran once, never in the manager.

use std::error::Error;
use std::io::Write;
use std::process::ExitCode;

use tensorshare::{Authkey, SharingContext, StrategyKind, Tensor, Value};

fn main() -> ExitCode {
    let Err(error) = run() else {
        return ExitCode::SUCCESS;
    };
    eprintln!("error: {error}");
    ExitCode::FAILURE
}

fn run() -> Result<(), Box<dyn Error>> {
    if let Some(start_log) = std::env::args_os().nth(1) {
        let mut log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(start_log)?;
        writeln!(log, "{}", std::process::id())?;
    }
    let authkey = Authkey::from_env()?.ok_or("set TENSORSHARE_AUTHKEY to the torch side's key")?;
    let sharing = SharingContext::new(authkey).with_strategy(StrategyKind::FileSystem);
    let listener = sharing.listen_in_private_dir()?;
    println!("listening {}", listener.address());
    let mut peer = listener.accept()?;
    let mut answered = 0;
    loop {
        let tensor = match peer.recv() {
            Ok(Value::None) => break,
            Err(closed) if closed.is_closed() => break,
            Ok(Value::Tensor(tensor)) => tensor,
            Ok(other) => return Err(format!("expected a tensor or None, got {other}").into()),
            Err(error) => return Err(error.into()),
        };
        let doubled: Vec<f32> = tensor.to_vec::<f32>()?.iter().map(|x| x * 2.0).collect();
        let sizes = tensor.sizes().to_vec();
        peer.send(&Tensor::from_slice(&sharing, &doubled, &sizes)?.into())?;
        answered += 1;
    }
    // What torch holds stays readable after this program exits: its
    // manager keeps the segments until torch lets go.
    println!("answered {answered} tensors");
    Ok(())
}
