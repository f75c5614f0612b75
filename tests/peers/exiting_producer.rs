//! A Rust producer that sends its batches and exits, for the tests of what a
//! receiver can still read after its sender is gone (`tests/exiting_producer.rs`).
//!
//!     exiting_producer STRATEGY BATCHES [--no-wait] [MEMMAP_DIR]
//!
//! With the authkey in `TENSORSHARE_AUTHKEY`, it listens in a private
//! directory, prints `listening ADDRESS`, accepts one receiver and sends it
//! `BATCHES` batches, `{"image": uint8 [8, 3, 64, 64], "label": int64 [8]}`,
//! each one storage of the context's strategy (`SharingContext::batch`), as a
//! DataLoader feeder does; then `None`. It prints `sent N` after batch `N`
//! (from 1), calls `wait_until_fetched` (unless `--no-wait`) and exits,
//! dropping everything it holds. Image `i` of batch `b` is filled with `(b * 8 + i) % 251`, and its
//! label is `b * 8 + i`.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use tensorshare::{Authkey, Dict, SharingContext, StrategyKind, Value};

const IMAGE: [usize; 4] = [8, 3, 64, 64];

fn main() -> ExitCode {
    match produce() {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("exiting_producer: {error}");
            ExitCode::FAILURE
        }
    }
}

fn produce() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: exiting_producer STRATEGY BATCHES [--no-wait] [MEMMAP_DIR]";
    let strategy: StrategyKind = args.next().ok_or(usage)?.parse()?;
    let batches: usize = args.next().ok_or(usage)?.parse()?;
    let mut rest = args.peekable();
    let wait = rest.next_if(|arg| arg == "--no-wait").is_none();
    let authkey = Authkey::from_env()?.ok_or("set TENSORSHARE_AUTHKEY")?;
    let mut sharing = SharingContext::new(authkey).with_strategy(strategy);
    if let Some(dir) = rest.next() {
        sharing = sharing.with_memmap_dir(dir)?;
    }
    let listener = sharing.listen_in_private_dir()?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "listening {}", listener.address())?;
    out.flush()?;
    let mut receiver = listener.accept()?;
    for b in 0..batches {
        let mut layout = sharing.batch();
        let images = layout.tensor::<u8>(&IMAGE)?;
        let labels = layout.tensor::<i64>(&IMAGE[..1])?;
        let mut writer = layout.allocate()?;
        let image_bytes = IMAGE[1..].iter().product::<usize>();
        for (i, image) in writer
            .as_mut_slice(images)?
            .chunks_mut(image_bytes)
            .enumerate()
        {
            image.fill(((b * 8 + i) % 251) as u8);
        }
        for (i, label) in writer.as_mut_slice(labels)?.iter_mut().enumerate() {
            *label = (b * 8 + i) as i64;
        }
        let batch = writer.freeze();
        let message = Dict::new()
            .with("image", batch.tensor(images).clone())
            .with("label", batch.tensor(labels).clone());
        receiver.send(&message.into())?;
        writeln!(out, "sent {}", b + 1)?;
        out.flush()?;
    }
    receiver.send(&Value::None)?;
    if wait {
        sharing.wait_until_fetched(Duration::from_secs(60))?;
    }
    writeln!(out, "done")?;
    Ok(())
}
