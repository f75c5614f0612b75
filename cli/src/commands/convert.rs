//! `tensorshare convert IN OUT [--legacy | --safetensors] [--key KEY]...
//! [--authkey-file PATH]`: rewrite a torch pickle (any strategy), a
//! `torch.save` file (zip or legacy) or a `.safetensors` file as a
//! `torch.save` file that stock torch loads with `weights_only=True`, or as
//! a `.safetensors` file. `-` reads stdin or writes stdout; the status line
//! goes to stderr, so stdout holds the file and nothing else.

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

use clap::Args;
use clap::error::ErrorKind;
use tensorshare::model::Storage;
use tensorshare::safetensors::{SafetensorsError, SafetensorsFile};
use tensorshare::torch_save::{self, TorchSaveFormat};
use tensorshare::{Authkey, Registry, SharingContext, Value};
use tensorshare_cli::error::CliError;

use super::authkey::AuthkeyArgs;
use super::input::{has_safetensors_extension, is_torch_save_file, read_input};

#[derive(Debug, Args)]
pub struct ConvertArgs {
    /// What to read: a pickle of any strategy, a torch.save file (zip or
    /// legacy), or a .safetensors file; `-` for stdin.
    input: PathBuf,
    /// Where to write: a name ending in .safetensors gets a safetensors
    /// file, any other a torch.save file; `-` for stdout.
    output: PathBuf,
    /// Write the legacy stream (`_use_new_zipfile_serialization=False`)
    /// instead of a zip.
    #[arg(long, conflicts_with = "safetensors")]
    legacy: bool,
    /// Write a safetensors file whatever OUT is named (for `-`): the input
    /// must be a flat dict of str to tensor, such as a state dict.
    #[arg(long)]
    safetensors: bool,
    /// Convert only the value under KEY in the input's dict, such as the
    /// state dict inside a training checkpoint (`--key model`); repeat it to
    /// go deeper (`--key model --key encoder`).
    #[arg(long = "key", value_name = "KEY")]
    keys: Vec<String>,
    // The sender's `multiprocessing.current_process().authkey`: needed
    // only to fetch the storages of a `file_descriptor` pickle from the
    // process that wrote it (the command's help says so).
    #[command(flatten)]
    authkey: AuthkeyArgs,
}

pub fn run(args: ConvertArgs) -> Result<(), CliError> {
    let authkey = args.authkey.optional()?;
    let input = args.input.display().to_string();
    let to_safetensors = args.safetensors || has_safetensors_extension(&args.output);
    if to_safetensors && args.legacy {
        return Err(CliError::usage(
            ErrorKind::ArgumentConflict,
            format!(
                "--legacy writes a torch.save file, but {} names a .safetensors file; \
                 drop --legacy, or name OUT otherwise",
                args.output.display()
            ),
        ));
    }
    let value = if has_safetensors_extension(&args.input) {
        // Straight from the file, each tensor into its own storage: the
        // file is not held in memory twice.
        tensorshare::safetensors::load(&args.input)?
    } else if is_torch_save_file(&args.input) {
        // Through a mapping: storages stay in the file until written out.
        tensorshare::torch_save::load(&args.input)?
    } else {
        let bytes = read_input(&args.input)?;
        load_any(&bytes, authkey).map_err(|e| format!("{input}: {e}"))?
    };
    let value = select(value, &args.keys).map_err(|e| format!("{input}: {e}"))?;
    if to_safetensors {
        return write_safetensors(&value, &input, &args.output, &args.keys);
    }
    let format = if args.legacy {
        TorchSaveFormat::Legacy
    } else {
        TorchSaveFormat::Zip
    };
    let (written, len) = if args.output.as_os_str() == "-" {
        // A zip is written seeking back over each record's header, which a
        // pipe cannot: built in memory for stdout only.
        let file = torch_save::to_bytes(&value, format).map_err(|e| format!("{input}: {e}"))?;
        write_stdout(&file)?;
        ("stdout".to_owned(), file.len() as u64)
    } else {
        tensorshare::torch_save::save_as(&value, &args.output, format)
            .map_err(|e| format!("{input}: {e}"))?;
        let len = std::fs::metadata(&args.output)
            .map_err(|e| CliError::io(format!("reading {}", args.output.display()), e))?
            .len();
        (args.output.display().to_string(), len)
    };
    eprintln!(
        "wrote {written} ({} torch.save, {len} bytes)",
        if args.legacy { "legacy" } else { "zip" },
    );
    if let Some(moved) = moved_to_cpu(&value) {
        eprintln!("{moved}");
    }
    Ok(())
}

/// The value under `keys`, one level of dict per key.
fn select(mut value: Value, keys: &[String]) -> Result<Value, String> {
    for (depth, key) in keys.iter().enumerate() {
        let path = key_path(&keys[..depth]);
        let items = match value.as_dict() {
            Some(items) => items.to_vec(),
            None => {
                let other = &value;
                let found = other.type_name();
                let article = if found.starts_with(['a', 'e', 'i', 'o', 'u']) {
                    "an"
                } else {
                    "a"
                };
                return Err(format!(
                    "--key {key}: {path} is {article} {found}, not a dict"
                ));
            }
        };
        let found = items.iter().find(|(k, _)| k.as_str() == Some(key.as_str()));
        value = match found {
            Some((_, found)) => found.clone(),
            None => {
                let names: Vec<String> = items
                    .iter()
                    .filter_map(|(k, _)| k.as_str())
                    .take(16)
                    .map(|k| format!("`{k}`"))
                    .collect();
                return Err(format!(
                    "--key {key}: {path} has no key `{key}` (its str keys: {})",
                    if names.is_empty() {
                        "none".to_owned()
                    } else {
                        names.join(", ")
                    }
                ));
            }
        };
    }
    Ok(value)
}

/// How to name the value `keys` lead to in a message.
fn key_path(keys: &[String]) -> String {
    if keys.is_empty() {
        return "the input".to_owned();
    }
    let keys: Vec<String> = keys.iter().map(|k| format!("[{k:?}]")).collect();
    format!("the input{}", keys.join(""))
}

/// Writes `value` as a safetensors file to `output` (a file, or stdout for
/// `-`) and says what was written.
fn write_safetensors(
    value: &Value,
    input: &str,
    output: &Path,
    keys: &[String],
) -> Result<(), CliError> {
    // The file's own methods keep the format's error, which says which key
    // is not a tensor.
    let file = SafetensorsFile::new(value.clone());
    let explain = |error: SafetensorsError| advise_key(error, value, input, keys);
    let (written, len) = if output.as_os_str() == "-" {
        // Written a tensor at a time: a safetensors file needs no seeking.
        let mut stdout = Counted {
            inner: binary_stdout()?,
            written: 0,
        };
        file.write(&mut stdout).map_err(explain)?;
        ("stdout".to_owned(), stdout.written)
    } else {
        file.save(output).map_err(explain)?;
        let len = std::fs::metadata(output)
            .map_err(|e| CliError::io(format!("reading {}", output.display()), e))?
            .len();
        (output.display().to_string(), len)
    };
    // Every name is a tensor of the file, tied ones included.
    let tensors = value.as_dict().map_or(0, <[_]>::len);
    eprintln!("wrote {written} (safetensors, {tensors} tensors, {len} bytes)");
    if let Some(shared) = sharing_memory(value) {
        eprintln!("{shared}");
    }
    if let Some(moved) = moved_to_cpu(value) {
        eprintln!("{moved}");
    }
    if let Some(dropped) = dropped_attributes(value) {
        eprintln!("{dropped}");
    }
    Ok(())
}

/// Says which attributes of a state dict safetensors has no place for: a
/// `state_dict()`'s `_metadata` holds each module's `version`, which
/// `load_state_dict` passes on to the module.
fn dropped_attributes(value: &Value) -> Option<String> {
    let Value::OrderedDict(_, attributes) = value else {
        return None;
    };
    if attributes.iter().len() == 0 {
        return None;
    }
    let names: Vec<String> = attributes
        .iter()
        .map(|(name, _)| format!("`{name}`"))
        .collect();
    Some(format!(
        "not written: the state dict's {} (safetensors has no place for it; `load_state_dict` \
         then sees no module versions, as for a state dict saved without them): write a .pt \
         to keep it",
        names.join(", ")
    ))
}

/// `error` from writing `value` as safetensors, with what to do: for a
/// value that is not a tensor, the keys of the input that hold state dicts.
fn advise_key(error: SafetensorsError, value: &Value, input: &str, keys: &[String]) -> CliError {
    let mut message = format!("{input}: {error}");
    if matches!(
        error,
        SafetensorsError::NotATensor { .. } | SafetensorsError::NotADict { .. }
    ) {
        let candidates = state_dict_keys(value);
        if candidates.is_empty() {
            message.push_str(
                "; safetensors holds a flat dict of str to tensor, and nothing in this value is one",
            );
        } else {
            let options: Vec<String> = candidates.iter().map(|k| format!("`--key {k}`")).collect();
            message.push_str(&format!(
                "; it holds state dicts: convert one with {}{}",
                options.join(" or "),
                if keys.is_empty() {
                    ""
                } else {
                    " after the --key options given"
                }
            ));
        }
    }
    CliError::Failed(message)
}

/// The str keys of `value` (a dict) whose values are dicts of str to tensor.
fn state_dict_keys(value: &Value) -> Vec<String> {
    let Some(items) = value.as_dict() else {
        return Vec::new();
    };
    items
        .iter()
        .filter_map(|(key, inner)| {
            let inner = inner.as_dict()?;
            let all_tensors = !inner.is_empty()
                && inner
                    .iter()
                    .all(|(k, v)| k.as_str().is_some() && v.as_tensor().is_some());
            all_tensors
                .then(|| key.as_str().map(str::to_owned))
                .flatten()
        })
        .collect()
}

/// Names the tensors of a state dict that share a storage (tied weights,
/// views of one storage): safetensors writes each with its own bytes.
fn sharing_memory(value: &Value) -> Option<String> {
    let items = value.as_dict()?;
    let mut by_storage: HashMap<usize, Vec<&str>> = HashMap::new();
    let mut order = Vec::new();
    for (key, tensor) in items.iter() {
        let (Some(key), Some(tensor)) = (key.as_str(), tensor.as_tensor()) else {
            continue;
        };
        let identity = tensor.storage().identity();
        let names = by_storage.entry(identity).or_default();
        if names.is_empty() {
            order.push(identity);
        }
        names.push(key);
    }
    let groups: Vec<String> = order
        .iter()
        .filter_map(|identity| by_storage.get(identity))
        .filter(|names| names.len() > 1)
        .map(|names| names.join(" = "))
        .collect();
    if groups.is_empty() {
        return None;
    }
    Some(format!(
        "tensors sharing memory, each written with its own copy (safetensors cannot say two \
         names are one memory; safetensors.torch.load_file gives them as separate tensors): {}",
        groups.join(", ")
    ))
}

/// Says which storages were saved off the CPU, and so are written as CPU
/// storages, as `torch.load(map_location="cpu")` then `torch.save` would.
fn moved_to_cpu(value: &Value) -> Option<String> {
    let mut seen = std::collections::HashSet::new();
    let mut locations = std::collections::BTreeMap::<&str, usize>::new();
    for storage in value.distinct().filter_map(Value::storage) {
        let location = storage.saved_location().filter(|l| *l != "cpu");
        if let Some(location) = location.filter(|_| seen.insert(storage.identity())) {
            *locations.entry(location).or_default() += 1;
        }
    }
    if locations.is_empty() {
        return None;
    }
    let counts: Vec<String> = locations
        .iter()
        .map(|(location, n)| format!("{n} saved on {location}"))
        .collect();
    Some(format!(
        "storages read as CPU storages, as torch.load(map_location=\"cpu\") reads them: {}",
        counts.join(", ")
    ))
}

/// Writes `file` to `output`, or to stdout for `-`; returns how to name
/// where it went.
fn write_stdout(file: &[u8]) -> Result<(), CliError> {
    let mut stdout = binary_stdout()?;
    stdout
        .write_all(file)
        .and_then(|()| stdout.flush())
        .map_err(|e| CliError::io("writing stdout", e))
}

/// Stdout, for a binary file: refused when it is a terminal.
fn binary_stdout() -> Result<std::io::StdoutLock<'static>, CliError> {
    let stdout = std::io::stdout().lock();
    if stdout.is_terminal() {
        return Err(CliError::Unsupported(
            "stdout is a terminal, and the output is a binary file: redirect stdout to a \
             file or a pipe, or name an output file instead of -"
                .to_owned(),
        ));
    }
    Ok(stdout)
}

/// A writer that counts what passes through it.
struct Counted<W> {
    inner: W,
    written: u64,
}

impl<W: Write> Write for Counted<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Rebuilds `bytes` with every storage's data at hand: torch.save files and
/// plain pickles carry it; shared storages are attached from the process
/// or file that holds them.
fn load_any(bytes: &[u8], authkey: Option<Authkey>) -> Result<Value, CliError> {
    let registry = Registry::default();
    let detected = tensorshare::inspect::inspect(bytes, &registry)?;
    if first_unreachable(&detected.object).is_none() {
        return Ok(detected.object);
    }
    let authkey = match authkey {
        Some(authkey) => authkey,
        None => Authkey::random()?,
    };
    let sharing = SharingContext::new(authkey);
    let attached = sharing.loads(bytes).map_err(|e| {
        CliError::Unsupported(format!(
            "its storages live in another process or in shared memory and cannot be \
             reached ({e}); convert it while the sending process is alive, and give its \
             authkey (TENSORSHARE_AUTHKEY or --authkey-file) for a file_descriptor pickle"
        ))
    })?;
    if let Some(storage) = first_unreachable(&attached) {
        return Err(CliError::Unsupported(format!(
            "a {} storage of {} bytes cannot be read in this process",
            storage.kind().name(),
            storage.nbytes()
        )));
    }
    Ok(attached)
}

/// The first storage in `value` whose bytes are not in this process.
fn first_unreachable(value: &Value) -> Option<&Storage> {
    value
        .distinct()
        .filter_map(Value::storage)
        .find(|storage| storage.bytes().is_none())
}
