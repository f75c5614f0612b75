//! What `inspect` and `convert` read: a `.safetensors` file, known by its
//! name; a `torch.save` file, known by its first bytes, both read through
//! a mapping; anything else (a pickle of any strategy, stdin for `-`) read
//! whole.

use std::io::Read;
use std::path::Path;

use tensorshare_cli::error::CliError;

/// The extension that makes OUT a safetensors file, and IN one to read as
/// such.
const SAFETENSORS_EXTENSION: &str = "safetensors";

/// Whether `path` ends in `.safetensors`.
pub fn has_safetensors_extension(path: &Path) -> bool {
    path.extension()
        .is_some_and(|extension| extension.eq_ignore_ascii_case(SAFETENSORS_EXTENSION))
}

/// Whether `path` names a regular file that starts as a `torch.save` file
/// does: a zip, or a legacy stream's magic number. Other inputs (stdin,
/// pickles of any strategy) are read whole.
pub fn is_torch_save_file(path: &Path) -> bool {
    /// The legacy stream's first pickle: protocol 2, the magic number.
    const LEGACY_MAGIC: &[u8] = b"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19";
    if path.as_os_str() == "-" {
        return false;
    }
    let Ok(mut file) = std::fs::File::open(path) else {
        return false;
    };
    if !file.metadata().is_ok_and(|m| m.is_file()) {
        return false;
    }
    let mut head = [0u8; LEGACY_MAGIC.len()];
    let read = file.read(&mut head).unwrap_or(0);
    let head = &head[..read];
    head.starts_with(b"PK\x03\x04") || head.starts_with(LEGACY_MAGIC)
}

/// The bytes of `path`, or of stdin for `-`.
pub fn read_input(path: &Path) -> Result<Vec<u8>, CliError> {
    if path.as_os_str() != "-" {
        return std::fs::read(path)
            .map_err(|e| CliError::io(format!("reading {}", path.display()), e));
    }
    let mut bytes = Vec::new();
    std::io::stdin()
        .lock()
        .read_to_end(&mut bytes)
        .map_err(|e| CliError::io("reading stdin", e))?;
    Ok(bytes)
}
