//! The shared-memory manager: libshm's protocol, server and client.
