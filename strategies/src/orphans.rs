//! Segments in `/dev/shm` left by processes that are gone.
