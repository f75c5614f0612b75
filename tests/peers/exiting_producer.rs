//! A Rust producer that sends its batches and exits, for the tests of what a
//! receiver can still read after its sender is gone (`tests/exiting_producer.rs`).
//!
//!     exiting_producer STRATEGY BATCHES [--no-wait] [--image N,C,H,W] [MEMMAP_DIR]
//!
//! With the authkey in `TENSORSHARE_AUTHKEY`, it listens in a private
//! directory, prints `listening ADDRESS`, accepts one receiver and sends it
//! `BATCHES` batches, `{"image": uint8 [8, 3, 64, 64], "label": int64 [8]}`
//! (the image of the shape `--image` gives), each one storage of the
//! context's strategy (`SharingContext::batch`), or placed by the default
//! for the STRATEGY `default`, as a DataLoader feeder does; then `None`. It prints `sent N` after batch `N`
//! (from 1), calls `wait_until_fetched` (unless `--no-wait`) and exits,
//! dropping everything it holds. Image `i` of batch `b` of `N` is filled
//! with `(b * N + i) % 251`, and its label is `b * N + i`.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use tensorshare::{Authkey, Dict, SharingContext, StrategyKind, Value};

const IMAGE: [usize; 4] = [8, 3, 64, 64];

const USAGE: &str =
    "usage: exiting_producer STRATEGY BATCHES [--no-wait] [--image N,C,H,W] [MEMMAP_DIR]";

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
    let strategy = match args.next().ok_or(USAGE)?.as_str() {
        "default" => None,
        name => Some(name.parse::<StrategyKind>()?),
    };
    let batches: usize = args.next().ok_or(USAGE)?.parse()?;
    let mut rest = args.peekable();
    let wait = rest.next_if(|arg| arg == "--no-wait").is_none();
    let image = match rest.next_if(|arg| arg == "--image") {
        Some(_) => parse_image(&rest.next().ok_or(USAGE)?)?,
        None => IMAGE,
    };
    let authkey = Authkey::from_env()?.ok_or("set TENSORSHARE_AUTHKEY")?;
    let mut sharing = SharingContext::new(authkey);
    if let Some(strategy) = strategy {
        sharing = sharing.with_strategy(strategy);
    }
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
        let images = layout.tensor::<u8>(&image)?;
        let labels = layout.tensor::<i64>(&image[..1])?;
        let mut writer = layout.allocate()?;
        let image_bytes = image[1..].iter().product::<usize>();
        let n = image[0];
        for (i, image) in writer
            .as_mut_slice(images)?
            .chunks_mut(image_bytes)
            .enumerate()
        {
            image.fill(((b * n + i) % 251) as u8);
        }
        for (i, label) in writer.as_mut_slice(labels)?.iter_mut().enumerate() {
            *label = (b * n + i) as i64;
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

/// An image shape written `N,C,H,W`.
fn parse_image(text: &str) -> Result<[usize; 4], Box<dyn std::error::Error>> {
    let sizes = text
        .split(',')
        .map(str::parse)
        .collect::<Result<Vec<usize>, _>>()?;
    Ok(<[usize; 4]>::try_from(sizes).map_err(|_| USAGE)?)
}
