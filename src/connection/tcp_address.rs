//! TCP addresses: a host and a port, as Python's `multiprocessing.connection`
//! takes them in a `(host, port)` tuple, written `host:port` or
//! `[v6addr]:port` on command lines.

use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::str::FromStr;
use std::time::Duration;

use super::ConnectionError;

/// The longest host name DNS allows.
const MAX_HOST_LEN: usize = 253;

/// A TCP endpoint: a host (an IP address or a name) and a port.
///
/// The host is kept as given, so that messages show the name a user wrote;
/// it is resolved only when connecting or binding, by the system's
/// `getaddrinfo` as Python resolves it. CPython's
/// `multiprocessing.connection` makes an `AF_INET` socket for every
/// `(host, port)` tuple, so a Python peer is reachable only over IPv4;
/// between tensorshare processes IPv6 works too (`[::1]:6000`).
///
/// # Examples
///
/// ```
/// use tensorshare::connection::TcpAddress;
///
/// let named: TcpAddress = "datahost:6000".parse()?;
/// assert_eq!((named.host(), named.port()), ("datahost", 6000));
/// let v6: TcpAddress = "[::1]:6000".parse()?;
/// assert_eq!((v6.host(), v6.to_string().as_str()), ("::1", "[::1]:6000"));
/// assert!("::1:6000".parse::<TcpAddress>().is_err(), "a bare IPv6 address needs brackets");
/// # Ok::<(), tensorshare::connection::ConnectionError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TcpAddress {
    host: String,
    port: u16,
}

impl TcpAddress {
    /// The endpoint `host`, `port`: an IP address (IPv6 without brackets)
    /// or a host name. Port 0 asks a listener for a free port.
    ///
    /// # Errors
    ///
    /// [`ConnectionError::InvalidAddress`] for an empty host, one longer
    /// than DNS allows, or one with characters no host name or IP address
    /// has.
    pub(crate) fn new(host: impl Into<String>, port: u16) -> Result<Self, ConnectionError> {
        let host = host.into();
        let invalid = |reason: &str| ConnectionError::InvalidAddress {
            address: format!("{}:{port}", host.escape_debug()),
            reason: reason.to_owned(),
        };
        if host.is_empty() {
            return Err(invalid(
                "the host is empty; give 0.0.0.0 to listen on every IPv4 interface, 127.0.0.1 \
                 for this machine only",
            ));
        }
        if host.len() > MAX_HOST_LEN {
            return Err(invalid(
                "the host name is longer than DNS allows (253 bytes)",
            ));
        }
        let is_ip = host.parse::<IpAddr>().is_ok();
        let name_chars = host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'));
        if !is_ip && !name_chars {
            return Err(invalid(
                "not an IP address or a host name (letters, digits, '.', '-' and '_')",
            ));
        }
        Ok(Self { host, port })
    }

    /// The host as given: an IP address or a name.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The port; 0 before a listener has bound one.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The host as an IP address, when it is one rather than a name.
    pub fn ip(&self) -> Option<IpAddr> {
        self.host.parse().ok()
    }

    /// The socket addresses the host resolves to, in `getaddrinfo`'s order
    /// (an IP address resolves to itself alone).
    ///
    /// # Errors
    ///
    /// The resolver's: an unknown name, no network.
    pub fn resolve(&self) -> io::Result<Vec<SocketAddr>> {
        if let Some(ip) = self.ip() {
            return Ok(vec![SocketAddr::new(ip, self.port)]);
        }
        let resolved: Vec<SocketAddr> =
            (self.host.as_str(), self.port).to_socket_addrs()?.collect();
        if resolved.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{} resolves to no address", self.host),
            ));
        }
        Ok(resolved)
    }

    /// A connection to the first resolved address that accepts one within
    /// `timeout` each, as Python's `socket.create_connection` tries them.
    ///
    /// # Errors
    ///
    /// The last address's error when none connects, or the resolver's.
    pub(crate) fn connect(&self, timeout: Duration) -> io::Result<TcpStream> {
        let mut last = None;
        for address in self.resolve()? {
            let attempt = if timeout.is_zero() {
                TcpStream::connect(address)
            } else {
                TcpStream::connect_timeout(&address, timeout)
            };
            match attempt {
                Ok(stream) => return Ok(stream),
                Err(error) => last = Some(error),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::from(io::ErrorKind::NotFound)))
    }

    /// A socket listening on the first resolved address that binds, IPv4
    /// ones first, with `SO_REUSEADDR` as CPython's `SocketListener` sets
    /// it. CPython binds a name's IPv4 address (its `Listener` makes an
    /// `AF_INET` socket for a tuple) and its `Client` connects over IPv4
    /// alone, so a name such as `localhost` that resolves to `::1` first
    /// still binds `127.0.0.1`, where a Python client finds it.
    ///
    /// # Errors
    ///
    /// The resolver's, or the last bind error (address in use, no such
    /// interface, a port below 1024 without the capability).
    pub(crate) fn listen(&self) -> io::Result<TcpListener> {
        let mut resolved = self.resolve()?;
        resolved.sort_by_key(SocketAddr::is_ipv6);
        TcpListener::bind(resolved.as_slice())
    }
}

impl From<SocketAddr> for TcpAddress {
    /// The endpoint of a socket address, its IP written as the host.
    fn from(address: SocketAddr) -> Self {
        Self {
            host: address.ip().to_canonical().to_string(),
            port: address.port(),
        }
    }
}

impl FromStr for TcpAddress {
    type Err = ConnectionError;

    /// Parses `host:port` or `[v6addr]:port`.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let invalid = |reason: &str| ConnectionError::InvalidAddress {
            address: text.escape_debug().to_string(),
            reason: reason.to_owned(),
        };
        let (host, port) = if let Some(rest) = text.strip_prefix('[') {
            let (v6, port) = rest
                .split_once("]:")
                .ok_or_else(|| invalid("write an IPv6 endpoint as [v6addr]:port"))?;
            v6.parse::<Ipv6Addr>()
                .map_err(|_| invalid("not an IPv6 address between the brackets"))?;
            (v6, port)
        } else {
            let (host, port) = text
                .rsplit_once(':')
                .ok_or_else(|| invalid("a TCP address is host:port"))?;
            if host.contains(':') {
                return Err(invalid("write an IPv6 address in brackets: [v6addr]:port"));
            }
            (host, port)
        };
        let port = port
            .parse::<u16>()
            .map_err(|_| invalid("the port is not a number from 0 to 65535"))?;
        Self::new(host, port)
    }
}

impl fmt::Display for TcpAddress {
    /// `host:port`, an IPv6 host in brackets: what [`FromStr`] reads.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// Whether `text` is written as a TCP endpoint rather than a socket path:
/// it does not start as a path or an abstract name does (`/`, `.`, `@`,
/// NUL), and ends in `:` and a port number, or starts with `[`.
pub(super) fn looks_like_tcp(text: &str) -> bool {
    if text.starts_with(['/', '.', '@', '\0']) {
        return false;
    }
    if text.starts_with('[') {
        return true;
    }
    text.rsplit_once(':').is_some_and(|(_, port)| {
        !port.is_empty() && port.len() <= 5 && port.bytes().all(|b| b.is_ascii_digit())
    })
}

/// Whether `ip` reaches only this machine: `127.0.0.0/8`, `::1`, or an
/// IPv4-mapped loopback address.
pub(crate) fn is_loopback(ip: IpAddr) -> bool {
    ip.to_canonical().is_loopback()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_v4_and_bracketed_v6() {
        for (text, host, port) in [
            ("localhost:6000", "localhost", 6000),
            ("0.0.0.0:0", "0.0.0.0", 0),
            ("[::1]:65535", "::1", 65535),
            ("data-host_1.example.org:80", "data-host_1.example.org", 80),
        ] {
            let address: TcpAddress = text.parse().expect(text);
            assert_eq!((address.host(), address.port()), (host, port));
            assert_eq!(address.to_string(), text);
        }
    }

    #[test]
    fn refuses_what_is_no_endpoint() {
        for text in [
            ":6000",
            "host:65536",
            "host:-1",
            "::1:6000",
            "[nope]:1",
            "[::1]6000",
            "a b:1",
        ] {
            assert!(text.parse::<TcpAddress>().is_err(), "{text}");
        }
        assert!(TcpAddress::new("h".repeat(254), 1).is_err());
    }

    #[test]
    fn tells_tcp_from_paths() {
        for tcp in ["localhost:6000", "1.2.3.4:1", "[::1]:1", "x:0"] {
            assert!(looks_like_tcp(tcp), "{tcp}");
        }
        for path in [
            "/tmp/a:1", "./a:1", "@a:1", "\0a:1", "a.sock", "a:b", "a:", "a:123456",
        ] {
            assert!(!looks_like_tcp(path), "{path}");
        }
    }

    #[test]
    fn loopback_includes_mapped_v4() {
        for ip in ["127.0.0.1", "127.1.2.3", "::1", "::ffff:127.0.0.1"] {
            assert!(is_loopback(ip.parse().expect(ip)), "{ip}");
        }
        for ip in ["10.0.0.1", "0.0.0.0", "::", "::ffff:10.0.0.1"] {
            assert!(!is_loopback(ip.parse().expect(ip)), "{ip}");
        }
    }

    #[test]
    fn a_name_binds_its_ipv4_address_where_python_clients_connect() {
        let named: TcpAddress = "localhost:0".parse().expect("name");
        let listener = named.listen().expect("bind localhost");
        let bound = listener.local_addr().expect("bound");
        assert!(bound.is_ipv4() && bound.ip().is_loopback(), "{bound}");
    }

    #[test]
    fn resolves_localhost_and_literals() {
        let literal: TcpAddress = "127.0.0.1:7".parse().expect("literal");
        assert_eq!(
            literal.resolve().expect("resolve"),
            ["127.0.0.1:7".parse().expect("addr")]
        );
        let named: TcpAddress = "localhost:7".parse().expect("name");
        let resolved = named.resolve().expect("localhost resolves");
        assert!(
            resolved
                .iter()
                .all(|a| is_loopback(a.ip()) && a.port() == 7),
            "{resolved:?}"
        );
    }
}
