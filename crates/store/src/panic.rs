//! Panics inside a storage engine, contained.
//!
//! An engine is third-party code that sees hostile files: a panic inside
//! it must fail the one call (or the one open) it happened in, never the
//! host. Engines run such code through [`contain`], which catches the
//! panic and marks the thread as being inside a contained call while the
//! code runs, so that a process-wide panic hook can tell a contained panic
//! (which the engine reports itself, as an error with its text) from a
//! real crash: see [`is_contained`].

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

thread_local! {
    /// How many contained calls this thread is inside right now.
    static DEPTH: Cell<usize> = const { Cell::new(0) };
}

/// Whether the current thread is running code whose panics are contained
/// (and reported by the caller as an error). A panic hook that prints
/// panics may leave those out: the caller's error carries the panic's
/// text.
pub fn is_contained() -> bool {
    DEPTH.with(|d| d.get() > 0)
}

/// Runs `f` with its panics contained: `Err` with the panic's text.
pub fn contain_sync<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    let _inside = Inside::enter();
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|p| text(&*p))
}

/// Polls `f` with its panics contained: `Err` with the panic's text. The
/// state `f` was working on is unknown after a panic; the caller must not
/// use it again (engines close the database it belonged to).
pub fn contain<F: Future>(f: F) -> Contained<F> {
    Contained(Box::pin(f))
}

/// The future of [`contain`].
pub struct Contained<F>(Pin<Box<F>>);

impl<F: Future> Future for Contained<F> {
    type Output = Result<F::Output, String>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let _inside = Inside::enter();
        let inner = self.0.as_mut();
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| inner.poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(v)) => Poll::Ready(Ok(v)),
            Err(p) => Poll::Ready(Err(text(&*p))),
        }
    }
}

/// Marks the thread while it is inside a contained call.
struct Inside;

impl Inside {
    fn enter() -> Inside {
        DEPTH.with(|d| d.set(d.get() + 1));
        Inside
    }
}

impl Drop for Inside {
    fn drop(&mut self) {
        DEPTH.with(|d| d.set(d.get().saturating_sub(1)));
    }
}

/// The message of a panic payload.
pub fn text(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_contained_panic_is_an_error_and_marks_the_thread() {
        assert_eq!(contain_sync(is_contained), Ok(true));
        assert!(!is_contained());
        assert_eq!(
            contain_sync(|| -> u32 { panic!("boom") }),
            Err("boom".to_string())
        );
        assert!(!is_contained(), "left marked after a panic");
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        assert_eq!(rt.block_on(contain(async { is_contained() })), Ok(true));
        let failed: Result<(), String> = rt.block_on(contain(async { panic!("async boom") }));
        assert_eq!(failed, Err("async boom".to_string()));
        assert!(!is_contained());
    }
}
