//! A Rust producer feeding a torch training loop: each batch is written
//! straight into shared memory and sent as the dict a DataLoader gives,
//! `{"image": uint8 [8, 3, 64, 64], "label": int64 [8]}`; `None` ends it.
//!
//! `train.py` (stock torch) starts it with its authkey in
//! `TENSORSHARE_AUTHKEY`, connects to the address it prints and trains on
//! what arrives: `python examples/feed-torch/train.py`.

use std::process::ExitCode;
use std::time::Duration;

use tensorshare::{Authkey, Dict, SharingContext, Tensor, Value};

const BATCHES: i64 = 16;
const IMAGE: [usize; 4] = [8, 3, 64, 64];

fn main() -> ExitCode {
    let Err(error) = produce() else {
        return ExitCode::SUCCESS;
    };
    eprintln!("error: {error}");
    ExitCode::FAILURE
}

fn produce() -> Result<(), Box<dyn std::error::Error>> {
    let authkey = Authkey::from_env()?.ok_or("set TENSORSHARE_AUTHKEY to the trainer's key")?;
    let sharing = SharingContext::new(authkey);
    let listener = sharing.listen_in_private_dir()?;
    println!("listening {}", listener.address());
    let mut trainer = listener.accept()?;
    for step in 0..BATCHES {
        // Image i is one shade; its label is the shade's tens digit.
        let labels: Vec<i64> = (0..8).map(|i| (step + i) % 10).collect();
        let mut image = sharing.allocate(IMAGE.iter().product())?;
        let pixels = image.as_mut_slice::<u8>()?;
        for (one_image, label) in pixels.chunks_mut(3 * 64 * 64).zip(&labels) {
            one_image.fill(*label as u8 * 10 + 5);
        }
        let batch = Dict::new()
            .with("image", image.into_tensor::<u8>(&IMAGE)?)
            .with("label", Tensor::from_slice(&sharing, &labels, &[8])?);
        trainer.send(&batch.into())?;
    }
    trainer.send(&Value::None)?;
    // Batches in named segments (the default, while /dev/shm has room)
    // outlive this process, and this returns at once; those in memfds (the
    // default past that room, or file_descriptor) torch fetches from this
    // process, and this waits until it has.
    sharing.wait_until_fetched(Duration::from_secs(60))?;
    println!("sent {BATCHES} batches of 8 images, written in shared memory");
    Ok(())
}
