//! What host bindings return, and how [`AlkError`] reaches a guest.

use alk_store::AlkError;

/// What a host binding returns: a domain error, which reaches the guest as
/// the WIT `error` variant, or a host bug, which traps the guest.
#[derive(Debug)]
pub enum CallError {
    /// Reaches the guest as a value.
    Domain(AlkError),
    /// Traps the guest.
    Trap(wasmtime::Error),
}

impl From<AlkError> for CallError {
    fn from(e: AlkError) -> Self {
        CallError::Domain(e)
    }
}

impl From<wasmtime::component::ResourceTableError> for CallError {
    fn from(e: wasmtime::component::ResourceTableError) -> Self {
        CallError::Trap(e.into())
    }
}

impl From<AlkError> for crate::bindings::alk::store::types::Error {
    fn from(e: AlkError) -> Self {
        use crate::bindings::alk::store::types::{Error, SetupFailure, TooLarge};
        alk_store::counters::count_error(&e);
        match e {
            AlkError::InvalidName(m) => Error::InvalidName(m),
            AlkError::ReservedName(m) => Error::ReservedName(m),
            AlkError::InvalidArgument(m) => Error::InvalidArgument(m),
            AlkError::PayloadTooLarge { size, limit, .. } => {
                Error::PayloadTooLarge(TooLarge { size, limit })
            }
            AlkError::StaleReceipt(m) => Error::StaleReceipt(m),
            AlkError::TransactionAborted(m) => Error::TransactionAborted(m),
            AlkError::Busy(m) => Error::Busy(m),
            AlkError::StoreSetup {
                ref path,
                ref found,
                supported,
                ..
            } => {
                // The message is the whole sentence (path, both formats,
                // detail), so a guest that only prints it says everything.
                Error::StoreSetup(SetupFailure {
                    path: path.display().to_string(),
                    found: found.clone(),
                    supported: supported.to_string(),
                    message: e.to_string(),
                })
            }
            // Only scheduling calls fail this way, and they report it in
            // their own error type; should another call ever meet one, the
            // text still reaches the guest.
            AlkError::InvalidSpec(m) | AlkError::LeadershipLost(m) => Error::InvalidArgument(m),
            AlkError::Internal(m) => {
                // The guest sees the text; the operator sees it in the log.
                tracing::error!(target: "alk", "internal failure reported to a guest: {m}");
                Error::Internal(m)
            }
        }
    }
}
