//! Random plain-data pickle graphs and a canonical text form of them, shared
//! by the encoder's round-trip tests.
//!
//! The canonical form is what `CANON_PY` computes in Python for the object
//! `pickle.loads` returns, so a graph, its decoded copy and its Python
//! counterpart compare as strings. Mutable containers (and non-empty tuples
//! and frozensets) carry an identity mark: `&n` where first met, `*n` where
//! met again, so that sharing and cycles are compared too. Set elements and
//! dict keys are hashable values written without marks; set elements are
//! sorted, since set order is Python's hash order.
// Each test crate that includes this module uses a different part of it.
#![allow(dead_code, unused_imports)]

mod canon;
mod compare;
mod generate;

pub use canon::{CANON_PY, canonical};
pub use compare::{cpython_would_write_the_same, same_graph};
pub use generate::{Step, build, steps};

/// Strips the sign-extension bytes a little-endian two's complement integer
/// does not need; zero becomes empty.
pub fn minimal(bytes: &[u8]) -> &[u8] {
    let mut len = bytes.len();
    while len > 0 {
        let top = bytes[len - 1];
        let sign_below = if len >= 2 {
            bytes[len - 2] & 0x80 != 0
        } else {
            false
        };
        if (top == 0 && !sign_below) || (top == 0xff && sign_below && len >= 2) {
            len -= 1;
        } else {
            break;
        }
    }
    &bytes[..len]
}

/// Two's complement negation in place.
fn negate(bytes: &mut [u8]) {
    let mut carry = true;
    for byte in bytes.iter_mut() {
        let (sum, overflow) = (!*byte).overflowing_add(u8::from(carry));
        *byte = sum;
        carry = overflow;
    }
}
