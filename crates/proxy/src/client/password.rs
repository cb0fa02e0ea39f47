//! Checking a password a client sent against the configured one, in time
//! that says nothing about either: both are hashed (SHA-256) and the
//! digests compared without an early exit, as Redis compares the hashes
//! its ACL users keep.

use ring::digest::{SHA256, digest};

/// Whether `given` is `expected`. Takes the same time whichever bytes
/// differ and whatever the lengths (beyond hashing them).
pub fn matches(expected: &str, given: &[u8]) -> bool {
    let want = digest(&SHA256, expected.as_bytes());
    let got = digest(&SHA256, given);
    let diff = want
        .as_ref()
        .iter()
        .zip(got.as_ref())
        .fold(0u8, |acc, (a, b)| acc | (a ^ b));
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn equal_passwords_only() {
        assert!(matches("secret", b"secret"));
        assert!(!matches("secret", b"secreT"));
        assert!(!matches("secret", b"secret "));
        assert!(!matches("secret", b""));
        assert!(matches("", b""));
    }
}
