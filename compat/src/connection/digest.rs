//! The HMAC digests of the handshake and CPython's `{digest}` prefix rules
//! (`_get_digest_name_and_payload`, `_create_response`, `_verify_challenge`).

use hmac::{Hmac, KeyInit, Mac};

use super::auth::{AuthError, Rejection, escaped_excerpt};

/// Length of the legacy challenge payload (CPython <= 3.11 `MESSAGE_LENGTH`).
pub const LEGACY_CHALLENGE_LEN: usize = 20;

/// Length of an HMAC-MD5 tag, which is also the length of a legacy response.
const MD5_TAG_LEN: usize = 16;

/// The longest name CPython allows inside `{...}` (`sha3_256`, `sha3_384`).
const MAX_DIGEST_NAME_LEN: usize = 8;

/// An HMAC digest the handshake can use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum HmacDigest {
    /// HMAC-MD5: all CPython <= 3.11 speaks, and what 3.12+ sends to a
    /// legacy 20-byte challenge.
    Md5,
    /// HMAC-SHA256: what CPython 3.12+ listeners and clients ask for.
    Sha256,
    /// HMAC-SHA384: allowed by CPython 3.12+, used only when a peer asks.
    Sha384,
}

impl HmacDigest {
    /// The name CPython uses in the `{name}` prefix and in `hmac.new`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Md5 => "md5",
            Self::Sha256 => "sha256",
            Self::Sha384 => "sha384",
        }
    }

    /// The length of this digest's tag in bytes.
    pub fn tag_len(self) -> usize {
        match self {
            Self::Md5 => MD5_TAG_LEN,
            Self::Sha256 => 32,
            Self::Sha384 => 48,
        }
    }

    /// HMAC of `message` under `key`.
    pub(crate) fn tag(self, key: &[u8], message: &[u8]) -> Result<Vec<u8>, AuthError> {
        Ok(match self {
            Self::Md5 => keyed::<md5::Md5>(key)?
                .chain_update(message)
                .finalize()
                .into_bytes()
                .to_vec(),
            Self::Sha256 => keyed::<sha2::Sha256>(key)?
                .chain_update(message)
                .finalize()
                .into_bytes()
                .to_vec(),
            Self::Sha384 => keyed::<sha2::Sha384>(key)?
                .chain_update(message)
                .finalize()
                .into_bytes()
                .to_vec(),
        })
    }

    /// Checks `tag` against the HMAC of `message` in constant time.
    pub(crate) fn verify(self, key: &[u8], message: &[u8], tag: &[u8]) -> Result<(), AuthError> {
        let verified = match self {
            Self::Md5 => keyed::<md5::Md5>(key)?
                .chain_update(message)
                .verify_slice(tag),
            Self::Sha256 => keyed::<sha2::Sha256>(key)?
                .chain_update(message)
                .verify_slice(tag),
            Self::Sha384 => keyed::<sha2::Sha384>(key)?
                .chain_update(message)
                .verify_slice(tag),
        };
        verified.map_err(|_| AuthError::WrongAuthkey(Rejection::PeerDigestWrong))
    }
}

fn keyed<D>(key: &[u8]) -> Result<Hmac<D>, AuthError>
where
    D: hmac::EagerHash,
    Hmac<D>: KeyInit,
{
    // HMAC takes keys of any length; this error cannot happen, but is not
    // worth a panic.
    <Hmac<D> as KeyInit>::new_from_slice(key)
        .map_err(|_| AuthError::Protocol("the HMAC implementation refused the authkey".into()))
}

/// A challenge or response split by CPython's rules.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum DigestChoice<'a> {
    /// 16 or 20 bytes with no prefix: HMAC-MD5, answered without a prefix.
    Legacy(&'a [u8]),
    /// `{name}` followed by the payload.
    Named {
        /// The digest the prefix names.
        digest: HmacDigest,
        /// The bytes after the closing brace.
        payload: &'a [u8],
    },
}

/// Splits a challenge (after `#CHALLENGE#`) or a response into its digest and
/// payload, as CPython 3.12's `_get_digest_name_and_payload` does.
pub(crate) fn digest_choice(message: &[u8]) -> Result<DigestChoice<'_>, AuthError> {
    if message.len() == LEGACY_CHALLENGE_LEN || message.len() == MD5_TAG_LEN {
        return Ok(DigestChoice::Legacy(message));
    }
    if let Some(after_brace) = message.strip_prefix(b"{") {
        let search = after_brace.get(..after_brace.len().min(MAX_DIGEST_NAME_LEN + 1));
        let close = search.and_then(|window| window.iter().position(|&b| b == b'}'));
        if let Some(close) = close {
            let name = after_brace.get(..close).unwrap_or_default();
            let payload = after_brace.get(close + 1..).unwrap_or_default();
            let digest = match name {
                b"md5" => Some(HmacDigest::Md5),
                b"sha256" => Some(HmacDigest::Sha256),
                b"sha384" => Some(HmacDigest::Sha384),
                b"sha3_256" | b"sha3_384" => {
                    return Err(AuthError::UnsupportedDigest(
                        String::from_utf8_lossy(name).into_owned(),
                    ));
                }
                _ => None,
            };
            if let Some(digest) = digest {
                return Ok(DigestChoice::Named { digest, payload });
            }
        }
    }
    Err(AuthError::Protocol(format!(
        "unsupported message length ({} bytes), missing digest prefix, or unsupported digest: \
         {}; the peer does not speak the multiprocessing.connection handshake",
        message.len(),
        escaped_excerpt(message)
    )))
}

/// The response to a challenge payload (the bytes after `#CHALLENGE#`), as
/// CPython 3.12's `_create_response` builds it: the MAC covers the whole
/// payload, `{digest}` prefix included.
pub(crate) fn create_response(
    authkey: &[u8],
    challenge: &[u8],
) -> Result<(HmacDigest, Vec<u8>), AuthError> {
    match digest_choice(challenge)? {
        DigestChoice::Legacy(_) => Ok((HmacDigest::Md5, HmacDigest::Md5.tag(authkey, challenge)?)),
        DigestChoice::Named { digest, .. } => {
            let tag = digest.tag(authkey, challenge)?;
            let mut response = Vec::with_capacity(digest.name().len() + 2 + tag.len());
            response.push(b'{');
            response.extend_from_slice(digest.name().as_bytes());
            response.push(b'}');
            response.extend_from_slice(&tag);
            Ok((digest, response))
        }
    }
}

/// Checks a peer's response to our challenge payload, as CPython 3.12's
/// `_verify_challenge` does; returns the digest the peer chose.
pub(crate) fn verify_response(
    authkey: &[u8],
    challenge: &[u8],
    response: &[u8],
) -> Result<HmacDigest, AuthError> {
    let (digest, tag) = match digest_choice(response)? {
        DigestChoice::Legacy(tag) => (HmacDigest::Md5, tag),
        DigestChoice::Named { digest, payload } => (digest, payload),
    };
    if tag.len() != digest.tag_len() {
        return Err(AuthError::Protocol(format!(
            "the peer answered with a {}-byte {} digest, expected {} bytes",
            tag.len(),
            digest.name(),
            digest.tag_len()
        )));
    }
    digest.verify(authkey, challenge, tag)?;
    Ok(digest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn legacy_lengths_need_no_prefix() {
        assert!(matches!(
            digest_choice(&[7; 20]),
            Ok(DigestChoice::Legacy(_))
        ));
        assert!(matches!(
            digest_choice(&[7; 16]),
            Ok(DigestChoice::Legacy(_))
        ));
    }

    #[test]
    fn prefix_names_the_digest() {
        let parsed = digest_choice(b"{sha256}abc").ok();
        assert_eq!(
            parsed,
            Some(DigestChoice::Named {
                digest: HmacDigest::Sha256,
                payload: b"abc"
            })
        );
    }

    #[test]
    fn unknown_or_missing_prefix_is_refused() {
        for bad in [
            &b"{sha1}0123456789abcdefghij"[..],
            b"{}0123456789abcdefghijk",
            b"no prefix",
        ] {
            assert!(
                matches!(digest_choice(bad), Err(AuthError::Protocol(_))),
                "{bad:?}"
            );
        }
        // CPython only looks for the brace within the first 10 bytes.
        assert!(matches!(
            digest_choice(b"{sha256xxxx}0123456789abcdefghij"),
            Err(AuthError::Protocol(_))
        ));
        assert!(matches!(
            digest_choice(b"{sha3_256}0123456789abcdefghij"),
            Err(AuthError::UnsupportedDigest(name)) if name == "sha3_256"
        ));
    }

    #[test]
    fn md5_matches_rfc_2202() {
        let tag = HmacDigest::Md5
            .tag(b"Jefe", b"what do ya want for nothing?")
            .unwrap();
        let hex: String = tag.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, "750c783e6ab0b503eaa86e310a5db738");
    }
}
