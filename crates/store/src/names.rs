//! Name rules shared by every capability.
//!
//! Bucket, queue, stream, lock and channel names become directory names or
//! rows shared by every process on a data directory, so they are held to a
//! small, portable charset. Guest input is hostile: every rule below exists
//! because a name breaking it could escape the data directory (`..`, `/`,
//! NUL), hide a store (a leading `.`), collide on case-folding file systems
//! poorly, or squat alk's own namespace.

use crate::error::{AlkError, AlkResult};

/// The prefix reserved for alk's own names, rejected on every entry point.
pub const RESERVED_PREFIX: &str = "__alkstore_";

/// The longest name accepted, in bytes (all accepted characters are ASCII).
pub const MAX_NAME_LEN: usize = 100;

/// Checks a shared name (bucket, queue, stream, lock, channel).
///
/// Rules: those of [`check_identifier`], plus: not starting with `.` (which
/// also rules out `.` and `..`); not starting with [`RESERVED_PREFIX`].
pub fn check_name(kind: &str, name: &str) -> AlkResult<()> {
    check_identifier(kind, name)?;
    if name.starts_with('.') {
        return Err(AlkError::InvalidName(format!(
            "{kind} name {name:?} starts with '.'"
        )));
    }
    if name.starts_with(RESERVED_PREFIX) {
        return Err(AlkError::ReservedName(format!(
            "{kind} name {name:?} starts with the reserved prefix {RESERVED_PREFIX:?}"
        )));
    }
    Ok(())
}

/// Checks a local identifier (a stream consumer, a lock owner): 1 to
/// [`MAX_NAME_LEN`] characters from `A-Z a-z 0-9 - _ .`. Identifiers never
/// become paths and live in their caller's own namespace, so the reserved
/// prefix does not apply to them.
pub fn check_identifier(kind: &str, name: &str) -> AlkResult<()> {
    if name.is_empty() {
        return Err(AlkError::InvalidName(format!("{kind} name is empty")));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(AlkError::InvalidName(format!(
            "{kind} name is {} bytes long; the limit is {MAX_NAME_LEN}",
            name.len()
        )));
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
    {
        return Err(AlkError::InvalidName(format!(
            "{kind} name {name:?} contains {bad:?}; allowed are A-Z a-z 0-9 - _ ."
        )));
    }
    Ok(())
}

/// Checks a key (a kv key, a stream event key): non-empty, at most
/// `max_bytes`, and without NUL (text with NUL is cut short by many SQLite
/// readers).
pub fn check_key(what: &'static str, key: &str, max_bytes: usize) -> AlkResult<()> {
    if key.is_empty() {
        return Err(AlkError::InvalidArgument(format!("{what} is empty")));
    }
    if key.len() > max_bytes {
        return Err(AlkError::PayloadTooLarge {
            what,
            size: key.len() as u64,
            limit: max_bytes as u64,
        });
    }
    if key.contains('\0') {
        return Err(AlkError::InvalidArgument(format!(
            "{what} contains a NUL character"
        )));
    }
    Ok(())
}

/// Checks the size of a value or payload against `max_bytes`.
pub fn check_size(what: &'static str, len: usize, max_bytes: usize) -> AlkResult<()> {
    if len > max_bytes {
        return Err(AlkError::PayloadTooLarge {
            what,
            size: len as u64,
            limit: max_bytes as u64,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_the_documented_charset() {
        for ok in [
            "a",
            "orders",
            "Orders-2024_v1.2",
            "x.y",
            &"a".repeat(MAX_NAME_LEN),
        ] {
            check_name("bucket", ok).unwrap_or_else(|e| panic!("{ok:?} rejected: {e}"));
        }
    }

    #[test]
    fn rejects_each_rule() {
        let long = "a".repeat(MAX_NAME_LEN + 1);
        for bad in [
            "",
            ".",
            "..",
            ".hidden",
            "a/b",
            "a\\b",
            "a\0b",
            "a b",
            "é",
            long.as_str(),
        ] {
            assert!(
                matches!(check_name("bucket", bad), Err(AlkError::InvalidName(_))),
                "{bad:?} accepted"
            );
        }
        assert!(matches!(
            check_name("bucket", "__alkstore_x"),
            Err(AlkError::ReservedName(_))
        ));
    }

    #[test]
    fn a_bad_name_is_quoted_once_in_the_error() {
        let Err(AlkError::InvalidName(text)) = check_name("bucket", "a\"b\\c\n") else {
            panic!("accepted");
        };
        // Debug-quoted once: the quote, backslash and newline appear as one
        // escape each, not escaped again.
        assert!(
            text.starts_with(r#"bucket name "a\"b\\c\n" contains '"'"#),
            "{text}"
        );
    }
}
