//! Listener and client addresses: `AF_UNIX` paths and abstract names as
//! CPython writes them, and TCP endpoints.

use std::ffi::OsStr;
use std::fmt;
use std::io;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::{SocketAddr, UnixListener};
use std::path::{Path, PathBuf};
use std::str::FromStr;

use super::tcp_address::looks_like_tcp;
use super::{ConnectionError, TcpAddress, random};

/// The longest socket path or abstract name, in bytes: `sun_path` holds 108
/// bytes, one of which is the path's terminating NUL or the abstract name's
/// leading NUL.
pub(crate) const MAX_ADDRESS_LEN: usize =
    tensorshare_strategies::platform::private_dir::MAX_SOCKET_PATH_LEN;

/// Random characters in generated directory and socket names, as CPython's
/// `tempfile` uses.
pub(super) const RANDOM_NAME_LEN: usize = 8;

/// Random characters in generated abstract names: nothing else makes them
/// unique.
const ABSTRACT_RANDOM_LEN: usize = 16;

/// How many fresh abstract names are tried before giving up: another
/// holder of a 16-character random name is already one in 10^25, so the
/// retries are for good measure.
const ABSTRACT_BIND_ATTEMPTS: usize = 8;

/// Where a listener listens: an `AF_UNIX` filesystem path or Linux
/// abstract name, or a TCP endpoint.
///
/// Parsed from text as CPython shows addresses: `/tmp/x.sock` is a path;
/// `"\0name"` (a leading NUL, as in Python's `Listener('\0name')`) or
/// `@name` (for command lines) is the abstract name `name`. A path that
/// really starts with `@` is written `./@name`. [`Display`](fmt::Display)
/// writes abstract names as `@name`.
///
/// A text that does not start with `/`, `.`, `@` or NUL and ends in `:` and
/// a port number (`localhost:6000`, `0.0.0.0:0`, `10.0.0.2:6000`), or
/// starts with `[` (`[::1]:6000`), is a TCP endpoint ([`TcpAddress`]): what
/// Python writes `Listener(("0.0.0.0", 6000))`. A relative socket path that
/// ends so is written with `./` in front (`./sock:1`). Every other text is
/// a path, as before TCP was supported.
///
/// # Examples
///
/// ```
/// use tensorshare::connection::Address;
///
/// let path: Address = "/tmp/pymp-abc/listener-xyz".parse()?;
/// assert_eq!(path.as_path().map(|p| p.to_str()), Some(Some("/tmp/pymp-abc/listener-xyz")));
///
/// let named: Address = "@tensorshare-echo".parse()?;
/// assert_eq!(named, "\0tensorshare-echo".parse()?);
/// assert_eq!(named.as_abstract_name(), Some(&b"tensorshare-echo"[..]));
/// assert_eq!(named.to_string(), "@tensorshare-echo");
/// // What a torch pickle carries in a DupFd's `_id`:
/// assert_eq!(Address::from_bytes(b"\0tensorshare-echo")?, named);
///
/// let tcp: Address = "datahost:6000".parse()?;
/// assert_eq!(tcp.as_tcp().map(|t| (t.host(), t.port())), Some(("datahost", 6000)));
/// assert_eq!(tcp.to_string(), "datahost:6000");
/// # Ok::<(), tensorshare::connection::ConnectionError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Address(Repr);

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Repr {
    Path(PathBuf),
    Abstract(Vec<u8>),
    Tcp(TcpAddress),
}

impl Address {
    /// The filesystem path `path`.
    ///
    /// # Errors
    ///
    /// [`ConnectionError::InvalidAddress`] for an empty path, a NUL byte in
    /// it, or more than 107 bytes (what `sun_path` holds with its NUL).
    pub fn path(path: impl Into<PathBuf>) -> Result<Self, ConnectionError> {
        let path = path.into();
        let bytes = path.as_os_str().as_bytes();
        let invalid = |reason: String| invalid_address(bytes, reason);
        if bytes.is_empty() {
            return Err(invalid("the path is empty".into()));
        }
        if bytes.contains(&0) {
            return Err(invalid(
                "a socket path cannot contain a NUL byte (a leading NUL makes an abstract name)"
                    .into(),
            ));
        }
        if bytes.len() > MAX_ADDRESS_LEN {
            return Err(invalid(format!(
                "the path is {} bytes and the kernel allows at most {MAX_ADDRESS_LEN}; choose a \
                 shorter path (for example under /tmp) or an abstract name (@name)",
                bytes.len()
            )));
        }
        Ok(Self(Repr::Path(path)))
    }

    /// The abstract name `name` (without the leading NUL).
    ///
    /// # Errors
    ///
    /// [`ConnectionError::InvalidAddress`] for an empty name or one of more
    /// than 107 bytes (what `sun_path` holds with its NUL).
    pub fn abstract_name(name: impl Into<Vec<u8>>) -> Result<Self, ConnectionError> {
        let name = name.into();
        if name.is_empty() {
            return Err(invalid_address(
                b"\0",
                "the abstract name is empty; give a name after the NUL or @".into(),
            ));
        }
        if name.len() > MAX_ADDRESS_LEN {
            let mut shown = vec![0u8];
            shown.extend_from_slice(&name);
            return Err(invalid_address(
                &shown,
                format!(
                    "the abstract name is {} bytes and the kernel allows at most \
                     {MAX_ADDRESS_LEN}; choose a shorter name",
                    name.len()
                ),
            ));
        }
        Ok(Self(Repr::Abstract(name)))
    }

    /// The TCP endpoint `host`, `port`: an IP address (IPv6 without
    /// brackets) or a host name. Port 0 asks a listener for a free port.
    ///
    /// # Errors
    ///
    /// [`ConnectionError::InvalidAddress`] for an empty host, one longer
    /// than DNS allows, or one with characters no host name or IP address
    /// has.
    pub fn tcp(host: impl Into<String>, port: u16) -> Result<Self, ConnectionError> {
        TcpAddress::new(host, port).map(Self::from)
    }

    /// The address from the byte form a pickle carries (the `address` of a
    /// `DupFd`'s `_id`, a Python `str` path or a `bytes` abstract name): a
    /// leading NUL starts an abstract name, anything else is a path. `@` has
    /// no special meaning here, and the result is never a TCP endpoint: a
    /// pickle cannot send a fetch across the network.
    ///
    /// # Errors
    ///
    /// As [`Address::path`] and [`Address::abstract_name`].
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, ConnectionError> {
        match bytes.split_first() {
            Some((0, name)) => Self::abstract_name(name),
            _ => Self::path(OsStr::from_bytes(bytes)),
        }
    }

    /// The byte form Python uses: the path's bytes, or NUL and the abstract
    /// name. Python's `Client` accepts a path only as `str` and an abstract
    /// name as `str` or `bytes`. A TCP endpoint gives its text, `host:port`
    /// (Python takes a `(host, port)` tuple instead).
    pub fn to_bytes(&self) -> Vec<u8> {
        match &self.0 {
            Repr::Tcp(tcp) => tcp.to_string().into_bytes(),
            Repr::Path(path) => path.as_os_str().as_bytes().to_vec(),
            Repr::Abstract(name) => {
                let mut bytes = Vec::with_capacity(name.len() + 1);
                bytes.push(0);
                bytes.extend_from_slice(name);
                bytes
            }
        }
    }

    /// The address in the form the standard library binds and connects to.
    ///
    /// # Errors
    ///
    /// Whatever `SocketAddr::from_pathname` or `from_abstract_name` return;
    /// an `AF_UNIX` `Address` always meets their limits. A TCP endpoint has
    /// no `AF_UNIX` form: `InvalidInput` (resolve it with
    /// [`TcpAddress::resolve`] instead).
    pub fn to_socket_addr(&self) -> io::Result<SocketAddr> {
        match &self.0 {
            Repr::Path(path) => SocketAddr::from_pathname(path),
            Repr::Abstract(name) => SocketAddr::from_abstract_name(name),
            Repr::Tcp(tcp) => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{tcp} is a TCP endpoint, not an AF_UNIX address"),
            )),
        }
    }

    /// A fresh socket path `dir/listener-XXXXXXXX`, as CPython's
    /// `arbitrary_address('AF_UNIX')` makes. Nothing is created; use a
    /// directory only this user can write to, such as a [`PrivateTempDir`](super::PrivateTempDir).
    ///
    /// # Errors
    ///
    /// [`ConnectionError::InvalidAddress`] when the path would be too long
    /// (choose a shorter directory, e.g. set `TMPDIR=/tmp`),
    /// [`ConnectionError::Io`] when no random bytes can be read.
    pub(crate) fn unique_in(dir: impl AsRef<Path>) -> Result<Self, ConnectionError> {
        let suffix = random::name_suffix(RANDOM_NAME_LEN)
            .map_err(|e| ConnectionError::io("reading random bytes for a socket name", e))?;
        Self::path(dir.as_ref().join(format!("listener-{suffix}")))
    }

    /// A fresh abstract name, `tensorshare-<tag>-<pid>-` and 16 random
    /// characters: unique, and nothing on disk, so nothing outlives the
    /// process that binds it.
    ///
    /// # Errors
    ///
    /// [`ConnectionError::Io`] when no random bytes can be read,
    /// [`ConnectionError::InvalidAddress`] for a `tag` so long that the
    /// name would not fit.
    pub fn unique_abstract(tag: &str) -> Result<Self, ConnectionError> {
        let suffix = random::name_suffix(ABSTRACT_RANDOM_LEN)
            .map_err(|e| ConnectionError::io("reading random bytes for a socket name", e))?;
        Self::abstract_name(format!("tensorshare-{tag}-{}-{suffix}", std::process::id()))
    }

    /// An `AF_UNIX` socket listening at this address.
    ///
    /// # Errors
    ///
    /// What `bind` fails with: the path exists, the name is taken, the
    /// directory is not writable; `InvalidInput` for a TCP endpoint.
    pub(crate) fn listen(&self) -> io::Result<UnixListener> {
        UnixListener::bind_addr(&self.to_socket_addr()?)
    }

    /// A socket listening at a fresh [`unique_abstract`](Self::unique_abstract)
    /// name with `tag`, and that name.
    ///
    /// # Errors
    ///
    /// As [`unique_abstract`](Self::unique_abstract), and
    /// [`ConnectionError::Bind`] when no name could be bound.
    pub(crate) fn listen_unique_abstract(
        tag: &str,
    ) -> Result<(UnixListener, Self), ConnectionError> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let address = Self::unique_abstract(tag)?;
            match address.listen() {
                Ok(listener) => return Ok((listener, address)),
                Err(cause)
                    if cause.kind() == io::ErrorKind::AddrInUse
                        && attempt < ABSTRACT_BIND_ATTEMPTS => {}
                Err(cause) => return Err(ConnectionError::Bind { address, cause }),
            }
        }
    }

    /// The path, for a filesystem address.
    pub fn as_path(&self) -> Option<&Path> {
        match &self.0 {
            Repr::Path(path) => Some(path),
            Repr::Abstract(_) | Repr::Tcp(_) => None,
        }
    }

    /// The name without its leading NUL, for an abstract address.
    pub fn as_abstract_name(&self) -> Option<&[u8]> {
        match &self.0 {
            Repr::Abstract(name) => Some(name),
            Repr::Path(_) | Repr::Tcp(_) => None,
        }
    }

    /// The host and port, for a TCP endpoint.
    pub fn as_tcp(&self) -> Option<&TcpAddress> {
        match &self.0 {
            Repr::Tcp(tcp) => Some(tcp),
            Repr::Path(_) | Repr::Abstract(_) => None,
        }
    }

    /// Whether this is a TCP endpoint.
    pub fn is_tcp(&self) -> bool {
        matches!(self.0, Repr::Tcp(_))
    }
}

impl FromStr for Address {
    type Err = ConnectionError;

    /// Parses a path, `"\0name"`, `@name`, `host:port` or `[v6addr]:port`.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        if looks_like_tcp(text) {
            return text.parse::<TcpAddress>().map(Self::from);
        }
        match text.strip_prefix('\0').or_else(|| text.strip_prefix('@')) {
            Some(name) => Self::abstract_name(name.as_bytes()),
            None => Self::path(text),
        }
    }
}

impl From<TcpAddress> for Address {
    fn from(tcp: TcpAddress) -> Self {
        Self(Repr::Tcp(tcp))
    }
}

impl From<std::net::SocketAddr> for Address {
    /// The TCP endpoint of a socket address.
    fn from(address: std::net::SocketAddr) -> Self {
        Self(Repr::Tcp(address.into()))
    }
}

impl TryFrom<&[u8]> for Address {
    type Error = ConnectionError;

    /// As [`Address::from_bytes`].
    fn try_from(bytes: &[u8]) -> Result<Self, Self::Error> {
        Self::from_bytes(bytes)
    }
}

impl TryFrom<&Path> for Address {
    type Error = ConnectionError;

    /// As [`Address::path`].
    fn try_from(path: &Path) -> Result<Self, Self::Error> {
        Self::path(path)
    }
}

impl fmt::Display for Address {
    /// A path as the path, an abstract name as `@name`, with control
    /// characters and bytes that are not UTF-8 written `\xNN`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Repr::Path(path) => write_escaped(f, path.as_os_str().as_bytes()),
            Repr::Abstract(name) => {
                f.write_str("@")?;
                write_escaped(f, name)
            }
            Repr::Tcp(tcp) => write!(f, "{tcp}"),
        }
    }
}

fn write_escaped(f: &mut fmt::Formatter<'_>, bytes: &[u8]) -> fmt::Result {
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            if c.is_control() {
                let mut encoded = [0u8; 4];
                for byte in c.encode_utf8(&mut encoded).bytes() {
                    write!(f, "\\x{byte:02x}")?;
                }
            } else {
                write!(f, "{c}")?;
            }
        }
        for byte in chunk.invalid() {
            write!(f, "\\x{byte:02x}")?;
        }
    }
    Ok(())
}

fn invalid_address(bytes: &[u8], reason: String) -> ConnectionError {
    const SHOWN: usize = 160;
    let shown = bytes.get(..SHOWN).unwrap_or(bytes);
    let ellipsis = if bytes.len() > SHOWN { "..." } else { "" };
    ConnectionError::InvalidAddress {
        address: format!("{}{ellipsis}", shown.escape_ascii()),
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_paths_and_both_abstract_spellings() {
        let path: Address = "/tmp/x.sock".parse().expect("path");
        assert_eq!(path.as_path(), Some(Path::new("/tmp/x.sock")));
        assert!(path.as_abstract_name().is_none());
        assert_eq!(path.to_string(), "/tmp/x.sock");
        assert_eq!(path.to_bytes(), b"/tmp/x.sock");

        let relative: Address = "./@name".parse().expect("relative path");
        assert_eq!(relative.as_path(), Some(Path::new("./@name")));

        let nul: Address = "\0name".parse().expect("abstract");
        let at: Address = "@name".parse().expect("abstract");
        assert_eq!(nul, at);
        assert_eq!(at.as_abstract_name(), Some(&b"name"[..]));
        assert_eq!(at.to_bytes(), b"\0name");
        assert_eq!(at.to_string(), "@name");
        assert_eq!(Address::from_bytes(b"\0name").expect("bytes"), at);
        assert_eq!(
            Address::from_bytes(b"@name").expect("a path").as_path(),
            Some(Path::new("@name"))
        );
    }

    #[test]
    fn tcp_endpoints_parse_and_print_back_and_paths_stay_paths() {
        for text in ["localhost:6000", "0.0.0.0:0", "10.0.0.2:6000", "[::1]:6000"] {
            let address: Address = text.parse().expect(text);
            assert!(address.is_tcp() && address.as_path().is_none(), "{text}");
            assert_eq!(address.to_string(), text);
            assert_eq!(
                address.to_string().parse::<Address>().expect("again"),
                address
            );
            assert!(address.to_socket_addr().is_err());
        }
        for path in ["/tmp/x:1", "./sock:1", "sock", "a:b", "@name:1"] {
            let address: Address = path.parse().expect(path);
            assert!(!address.is_tcp(), "{path}");
        }
        assert!("host:99999".parse::<Address>().is_err());
        let std: std::net::SocketAddr = "[::ffff:127.0.0.1]:5".parse().expect("std");
        assert_eq!(Address::from(std).to_string(), "127.0.0.1:5");
        // A pickle's address bytes never name a TCP endpoint.
        assert!(
            !Address::from_bytes(b"127.0.0.1:6000")
                .expect("a path")
                .is_tcp()
        );
    }

    #[test]
    fn display_escapes_what_a_terminal_would_mangle() {
        let odd = Address::abstract_name(&b"a\0b\xffc\n"[..]).expect("abstract");
        assert_eq!(odd.to_string(), "@a\\x00b\\xffc\\x0a");
        let unicode = Address::path("/tmp/é").expect("path");
        assert_eq!(unicode.to_string(), "/tmp/é");
    }

    #[test]
    fn refuses_what_the_kernel_would() {
        let longest = format!("/{}", "a".repeat(MAX_ADDRESS_LEN - 1));
        Address::path(&longest).expect("the longest path fits");
        let error = Address::path(format!("{longest}a"))
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("108 bytes") && error.contains("at most 107"),
            "{error}"
        );
        Address::abstract_name(vec![b'n'; MAX_ADDRESS_LEN]).expect("the longest name fits");
        assert!(Address::abstract_name(vec![b'n'; MAX_ADDRESS_LEN + 1]).is_err());
        assert!("".parse::<Address>().is_err());
        assert!("@".parse::<Address>().is_err());
        assert!("\0".parse::<Address>().is_err());
        assert!(Address::from_bytes(b"/tmp/a\0b").is_err());
        assert!(Address::from_bytes(b"").is_err());
    }

    #[test]
    fn unique_abstract_names_say_whose_they_are() {
        let first = Address::unique_abstract("listener").expect("a name");
        let name = std::str::from_utf8(first.as_abstract_name().expect("abstract")).expect("ascii");
        let prefix = format!("tensorshare-listener-{}-", std::process::id());
        assert!(
            name.strip_prefix(&prefix).is_some_and(|r| r.len() == 16),
            "{name}"
        );
        assert_ne!(first, Address::unique_abstract("listener").expect("a name"));
    }

    #[test]
    fn converts_to_std_socket_addresses() {
        for text in ["/tmp/x.sock", "@name"] {
            let address: Address = text.parse().expect("address");
            let std_address = address.to_socket_addr().expect("std address");
            assert_eq!(std_address.as_pathname(), address.as_path());
            assert_eq!(std_address.as_abstract_name(), address.as_abstract_name());
        }
    }
}
