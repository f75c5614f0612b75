//! The shared secret of the `multiprocessing.connection` handshake.

use std::fmt;

use super::{ConnectionError, random};

/// The environment variable [`Authkey::from_env`] reads: the key in hex.
pub const AUTHKEY_ENV: &str = "TENSORSHARE_AUTHKEY";

/// The length of [`Authkey::random`] keys, as `multiprocessing`'s
/// `os.urandom(32)`.
pub(crate) const RANDOM_AUTHKEY_LEN: usize = 32;

/// The shortest authkey a network listener should accept: 16 bytes, 128
/// bits. The handshake sends a random challenge and its HMAC in the clear,
/// so anyone who sees one handshake on the wire can test guesses at the
/// key offline, as fast as they can compute HMACs; only a key too long to
/// guess survives that. `tensorshare echo` refuses a shorter key for a TCP
/// listener; [`Authkey::random`] makes 32 bytes, as CPython does.
pub const MIN_TCP_AUTHKEY_LEN: usize = 16;

/// The secret both ends of a connection prove they hold.
///
/// `Debug` shows only the length: keys do not end up in logs. See the
/// [module docs](super) for how a Rust and a Python program agree on one.
///
/// # Examples
///
/// ```
/// use tensorshare::Authkey;
///
/// let key = Authkey::from_hex("00ff10")?;
/// assert_eq!(key.as_bytes(), [0x00, 0xff, 0x10]);
/// assert_eq!(key.to_hex(), "00ff10");
/// assert_eq!(format!("{key:?}"), "Authkey(3 bytes)");
/// # Ok::<(), tensorshare::connection::ConnectionError>(())
/// ```
#[derive(Clone)]
pub struct Authkey(Vec<u8>);

impl Authkey {
    /// An authkey made of these bytes.
    pub fn new(bytes: impl Into<Vec<u8>>) -> Self {
        Self(bytes.into())
    }

    /// A fresh key of 32 random bytes, as a new
    /// `multiprocessing` parent process makes.
    ///
    /// # Errors
    ///
    /// [`ConnectionError::InvalidAuthkey`] if the kernel's random source
    /// cannot be read.
    pub fn random() -> Result<Self, ConnectionError> {
        let mut bytes = vec![0u8; RANDOM_AUTHKEY_LEN];
        random::fill(&mut bytes).map_err(|e| {
            ConnectionError::InvalidAuthkey(format!(
                "cannot read the kernel's random source to make one: {e}"
            ))
        })?;
        Ok(Self(bytes))
    }

    /// Parses a key written in hex, as Python's `authkey.hex()` writes it.
    /// Surrounding whitespace is ignored; either letter case is accepted.
    ///
    /// # Errors
    ///
    /// [`ConnectionError::InvalidAuthkey`] for an odd number of digits or a
    /// character that is not a hex digit (named by offset only, since the
    /// text is secret).
    pub fn from_hex(hex: &str) -> Result<Self, ConnectionError> {
        let digits = hex.trim().as_bytes();
        if !digits.len().is_multiple_of(2) {
            return Err(ConnectionError::InvalidAuthkey(format!(
                "the hex form has an odd number of digits ({}); write every byte as two digits, \
                 as Python's authkey.hex() does",
                digits.len()
            )));
        }
        let mut bytes = Vec::with_capacity(digits.len() / 2);
        for (pair_index, pair) in digits.chunks_exact(2).enumerate() {
            let digit = |offset: usize| {
                let position = pair_index * 2 + offset;
                pair.get(offset)
                    .and_then(|d| char::from(*d).to_digit(16))
                    .and_then(|d| u8::try_from(d).ok())
                    .ok_or_else(|| {
                        ConnectionError::InvalidAuthkey(format!(
                            "character {position} of the hex form is not a hex digit; give the \
                             key as hex, e.g. multiprocessing.current_process().authkey.hex()"
                        ))
                    })
            };
            bytes.push((digit(0)? << 4) | digit(1)?);
        }
        Ok(Self(bytes))
    }

    /// The key from the [`AUTHKEY_ENV`] (`TENSORSHARE_AUTHKEY`) environment
    /// variable, in hex; `None` when it is not set.
    ///
    /// # Errors
    ///
    /// [`ConnectionError::InvalidAuthkey`] when the variable is set but is
    /// empty, not Unicode, or not hex. An empty value is refused rather than
    /// read as an empty key: it is more often an unset shell variable than a
    /// choice.
    pub fn from_env() -> Result<Option<Self>, ConnectionError> {
        let Some(value) = std::env::var_os(AUTHKEY_ENV) else {
            return Ok(None);
        };
        let value = value.into_string().map_err(|_| {
            ConnectionError::InvalidAuthkey(format!("{AUTHKEY_ENV} is not valid Unicode hex"))
        })?;
        if value.trim().is_empty() {
            return Err(ConnectionError::InvalidAuthkey(format!(
                "{AUTHKEY_ENV} is set but empty; set it to the key in hex, or unset it"
            )));
        }
        Self::from_hex(&value)
            .map(Some)
            .map_err(|error| match error {
                ConnectionError::InvalidAuthkey(reason) => {
                    ConnectionError::InvalidAuthkey(format!("{AUTHKEY_ENV}: {reason}"))
                }
                other => other,
            })
    }

    /// The key in lowercase hex, for `bytes.fromhex` on the Python side.
    pub fn to_hex(&self) -> String {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut hex = String::with_capacity(self.0.len() * 2);
        for byte in &self.0 {
            for nibble in [byte >> 4, byte & 0x0f] {
                hex.push(char::from(
                    DIGITS.get(usize::from(nibble)).copied().unwrap_or(b'0'),
                ));
            }
        }
        hex
    }

    /// The key's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for Authkey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Authkey({} bytes)", self.0.len())
    }
}

impl PartialEq for Authkey {
    /// Compares in time independent of where the keys differ.
    fn eq(&self, other: &Self) -> bool {
        self.0.len() == other.0.len()
            && self
                .0
                .iter()
                .zip(&other.0)
                .fold(0u8, |difference, (a, b)| difference | (a ^ b))
                == 0
    }
}

impl Eq for Authkey {}

impl Drop for Authkey {
    fn drop(&mut self) {
        // Best effort: a freed key should not linger in reused heap memory.
        self.0.fill(0);
        std::hint::black_box(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trips_and_refuses_bad_digits() {
        let key = Authkey::from_hex(" 00A1ff\n").expect("valid hex");
        assert_eq!(key.as_bytes(), [0x00, 0xa1, 0xff]);
        assert_eq!(key.to_hex(), "00a1ff");
        assert_eq!(Authkey::from_hex("").expect("empty").as_bytes().len(), 0);
        let odd = Authkey::from_hex("abc").unwrap_err().to_string();
        assert!(odd.contains("odd number"), "{odd}");
        let bad = Authkey::from_hex("00zz").unwrap_err().to_string();
        assert!(bad.contains("character 2"), "{bad}");
        assert!(!bad.contains("zz"), "the secret is not echoed: {bad}");
        // Multi-byte characters are not digits and do not break pairing.
        assert!(Authkey::from_hex("é0").is_err());
    }

    #[test]
    fn random_keys_are_distinct_and_hidden_from_debug() {
        let a = Authkey::random().expect("random");
        let b = Authkey::random().expect("random");
        assert_eq!(a.as_bytes().len(), RANDOM_AUTHKEY_LEN);
        assert_ne!(a, b);
        assert_eq!(a, a.clone());
        let shown = format!("{a:?}");
        assert_eq!(shown, "Authkey(32 bytes)");
        assert!(!shown.contains(&a.to_hex()));
    }
}
