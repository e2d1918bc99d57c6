//! The one error type of alk's stores, for every engine.
//!
//! Every variant maps to exactly one case of the WIT `types.error` variant, so
//! a guest can act on it. Host bugs never become an [`AlkError`]; they trap.

use std::path::PathBuf;

/// A failed alk operation. Nothing stored was changed by an operation that
/// returns one of these (operations are single statements or transactions
/// that roll back as a whole).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AlkError {
    /// A name broke the naming rules; the text names the rule.
    #[error("invalid name: {0}")]
    InvalidName(String),
    /// A name used the reserved prefix `__alkstore_`.
    #[error("reserved name: {0}")]
    ReservedName(String),
    /// An argument other than a name is unusable (key, cursor, TTL, handle).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A key, value or payload exceeds the configured limit.
    #[error("{what} is {size} bytes, over the limit of {limit} bytes")]
    PayloadTooLarge {
        /// What was too large ("value", "key", "payload").
        what: &'static str,
        /// Its size in bytes.
        size: u64,
        /// The limit in bytes.
        limit: u64,
    },
    /// A queue receipt was superseded by a newer delivery of its message.
    #[error("stale receipt: {0}")]
    StaleReceipt(String),
    /// A transaction was rolled back by the host; nothing in it applied.
    #[error("transaction aborted: {0}")]
    TransactionAborted(String),
    /// Other writers kept the store locked past the retry deadline.
    #[error("store busy: {0}")]
    Busy(String),
    /// A store file could not be opened: foreign format, corrupt, unreadable.
    #[error("{}", setup_message(path, found.as_deref(), supported, message))]
    StoreSetup {
        /// The store file.
        path: PathBuf,
        /// The format marker found, if any.
        found: Option<String>,
        /// The format this host supports for that store.
        supported: &'static str,
        /// Detail.
        message: String,
    },
    /// A schedule spec is not one alk understands (only
    /// `@every <n><s|m|h|d>`); the text says why.
    #[error("invalid schedule spec: {0}")]
    InvalidSpec(String),
    /// A schedule runner lost the scheduler's leadership (its lock expired
    /// or was taken before it renewed it); another runner may be firing.
    #[error("scheduler leadership lost: {0}")]
    LeadershipLost(String),
    /// An unexpected failure of the engine or the file system.
    #[error("internal error: {0}")]
    Internal(String),
}

fn setup_message(
    path: &std::path::Path,
    found: Option<&str>,
    supported: &str,
    message: &str,
) -> String {
    match found {
        Some(found) => format!(
            "store {} has format {found:?}, this host supports {supported:?}: {message}",
            path.display()
        ),
        None => format!(
            "store {} (format {supported:?}) cannot be used: {message}",
            path.display()
        ),
    }
}

/// Shorthand for results of alk operations.
pub type AlkResult<T> = Result<T, AlkError>;
