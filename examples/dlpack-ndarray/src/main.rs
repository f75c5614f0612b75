//! A Rust server that lends the tensors torch sends it to another library
//! through DLPack, without a copy: each float32 tensor (any shape, any
//! strides) goes to `dlpark`, whose ndarray view of it sums each row; the
//! sums go back as `{"row_sums": tensor}`. A message that is not a float32
//! tensor is answered with `{"error": why}`.
//!
//! The view reads the very memory torch shared: the export keeps the
//! received storage (and its mapping) alive until `dlpark` drops it and
//! calls its deleter, which it may do on any thread.
//!
//! `client.py` (stock torch) starts it with its authkey in
//! `TENSORSHARE_AUTHKEY`, connects to the address it prints and checks the
//! answers: `python examples/dlpack-ndarray/client.py`.

use std::error::Error;
use std::process::ExitCode;

use dlpark::versioned;
use ndarray::{ArrayViewD, Axis};
use tensorshare::connection::Address;
use tensorshare::{Authkey, Connection, DType, Dict, SharingContext, Tensor, Value};

fn main() -> ExitCode {
    let Err(error) = serve() else {
        return ExitCode::SUCCESS;
    };
    eprintln!("error: {error}");
    ExitCode::FAILURE
}

/// Serves one client, until it closes the connection.
fn serve() -> Result<(), Box<dyn Error>> {
    let authkey = Authkey::from_env()?.ok_or("set TENSORSHARE_AUTHKEY to the client's key")?;
    let sharing = SharingContext::new(authkey);
    // An abstract name: nothing on disk to clean up however the server ends.
    let listener = sharing.listen(&Address::unique_abstract("dlpack-ndarray")?)?;
    println!("listening {}", listener.address());
    let mut client = loop {
        match listener.accept() {
            Ok(client) => break client,
            // A peer with another key: refused, and the server waits on.
            Err(refused) if refused.is_handshake_failure() => eprintln!("refused: {refused}"),
            Err(fatal) => return Err(fatal.into()),
        }
    };
    let served = serve_client(&mut client)?;
    println!("summed the rows of {served} tensors torch sent, through dlpark");
    Ok(())
}

/// Answers each message; a message refused whole (a hostile pickle, a
/// storage that cannot be fetched) is reported and the next one read.
fn serve_client(client: &mut Connection) -> Result<usize, Box<dyn Error>> {
    let mut served = 0;
    loop {
        let message = match client.recv() {
            Ok(message) => message,
            Err(closed) if closed.is_closed() => return Ok(served),
            Err(refused) if refused.is_refused_message() => {
                eprintln!("a message refused: {refused}");
                continue;
            }
            Err(error) => return Err(error.into()),
        };
        let reply: Value = match row_sums(&message, client.sharing()) {
            Ok(sums) => Dict::new().with("row_sums", sums).into(),
            Err(error) => Dict::new().with("error", error.to_string()).into(),
        };
        client.send(&reply)?;
        served += 1;
    }
}

/// The sums along the last axis of `message`, a float32 tensor, read in
/// place through a DLPack export viewed by `dlpark` as an ndarray.
fn row_sums(message: &Value, sharing: &SharingContext) -> Result<Tensor, Box<dyn Error>> {
    let tensor = message.as_tensor().ok_or("expected a tensor")?;
    if tensor.dtype() != DType::Float32 || tensor.sizes().is_empty() {
        return Err(format!(
            "expected a float32 tensor of one dimension or more, got {} {:?}",
            tensor.dtype(),
            tensor.sizes()
        )
        .into());
    }
    let lent = tensor.to_dlpack()?.into_raw();
    // SAFETY: a live export from `to_dlpack`, handed over once: `dlpark`
    // now owns it and calls its deleter when `managed` drops. The two
    // crates' DLManagedTensorVersioned are the same C struct.
    let managed = unsafe { versioned::Dlpack::new(lent.cast()) }.ok_or("a null export")?;
    let view = ArrayViewD::<f32>::try_from(&managed)?;
    // Zero-copy: the view starts where the tensor's first element is.
    debug_assert_eq!(view.as_ptr().cast::<u8>(), first_element(tensor));
    let sums = view.sum_axis(Axis(view.ndim() - 1));
    let sizes = sums.shape().to_vec();
    let sums: Vec<f32> = sums.into_iter().collect();
    Ok(Tensor::from_slice(sharing, &sums, &sizes)?)
}

/// The address of `tensor`'s first element in its storage's memory.
fn first_element(tensor: &Tensor) -> *const u8 {
    let bytes = tensor.storage().bytes().unwrap_or_default();
    bytes[tensor.storage_offset() * tensor.dtype().element_size()..].as_ptr()
}
