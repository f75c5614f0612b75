//! [`SharerOptions`]: how a sharer serves.

use std::time::Duration;

use tensorshare_compat::connection::Dialect;

/// How a [`ResourceSharer`](super::ResourceSharer) serves.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tensorshare::resource_sharer::SharerOptions;
///
/// let options = SharerOptions::new().with_connection_timeout(Duration::from_secs(2));
/// assert_eq!(options.connection_timeout(), Duration::from_secs(2));
/// assert_eq!(options.workers(), 4);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SharerOptions {
    connection_timeout: Duration,
    workers: usize,
    dialect: Dialect,
}

impl SharerOptions {
    /// Ten seconds per connection, four workers, the CPython >= 3.12
    /// challenge (which every CPython client answers).
    pub fn new() -> Self {
        Self {
            connection_timeout: Duration::from_secs(10),
            workers: 4,
            dialect: Dialect::Modern,
        }
    }

    /// Sets how long one connection may take from accept to the fd being
    /// sent; a client slower than that is disconnected and counted in
    /// [`SharerStats::timed_out`](super::SharerStats::timed_out). Zero is raised to one millisecond.
    #[must_use]
    pub fn with_connection_timeout(mut self, timeout: Duration) -> Self {
        self.connection_timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// Sets how many connections are served at once (at least 1): so many
    /// stalled clients can delay the others by up to the connection timeout.
    #[must_use]
    pub fn with_workers(mut self, workers: usize) -> Self {
        self.workers = workers.max(1);
        self
    }

    /// Sets which authkey challenge the sharer sends ([`Dialect`]).
    #[must_use]
    pub fn with_dialect(mut self, dialect: Dialect) -> Self {
        self.dialect = dialect;
        self
    }

    /// The time limit per connection.
    pub fn connection_timeout(&self) -> Duration {
        self.connection_timeout
    }

    /// How many connections are served at once.
    pub fn workers(&self) -> usize {
        self.workers
    }

    /// The challenge the sharer sends.
    pub fn dialect(&self) -> Dialect {
        self.dialect
    }
}

impl Default for SharerOptions {
    fn default() -> Self {
        Self::new()
    }
}
