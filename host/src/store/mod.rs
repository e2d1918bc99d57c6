//! Storage: the on-disk formats and the SQL that reads and writes them.
//!
//! Nothing in this module knows about wasmtime; every operation takes plain
//! Rust values (and the current time, so expiry is testable without
//! sleeping) and returns [`crate::AlkResult`].

mod gate;
pub mod inspect;
pub mod json;
pub mod kv;
pub mod lock;
pub mod names;
pub mod open;
pub mod queue;
pub mod retry;
pub mod stream;
pub mod wake;

pub use open::{Durability, Format, Store, StoreOptions, open_store};

/// The most items one batch call takes; more is an `invalid-argument`
/// error, so one call cannot hold the write lock for unbounded time.
pub const MAX_BATCH: usize = 1000;

/// A read that returns many values (kv `get-many` and `scan-prefix`, stream
/// reads) stops adding values once their bytes reach this many (it always
/// returns at least one), so a guest cannot make the host buffer a thousand
/// maximum-size values at once. The caller learns it from a shorter list or
/// a next cursor and asks again for the rest.
pub const MAX_READ_BYTES: usize = 16 * 1024 * 1024;

/// Refuses a batch over [`MAX_BATCH`] items.
pub(crate) fn check_batch(what: &str, len: usize) -> crate::AlkResult<()> {
    if len > MAX_BATCH {
        return Err(crate::AlkError::InvalidArgument(format!(
            "{len} {what} in one batch; the limit is {MAX_BATCH}"
        )));
    }
    Ok(())
}
pub use retry::RetryPolicy;

/// Asserts that a format document carries each `(name, sql)` verbatim
/// (whitespace aside): the document and the code pin the same format.
#[cfg(test)]
pub(crate) fn assert_document_pins(doc_name: &str, doc: &str, statements: &[(&str, &str)]) {
    let squash = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    let doc = squash(doc);
    for (name, sql) in statements {
        assert!(
            doc.contains(&squash(sql)),
            "{name} differs from docs/formats/{doc_name}"
        );
    }
}
