//! Rust bindings of `alk:store` for guest components.
//!
//! ```ignore
//! use alk_guest::kv::Bucket;
//! let bucket = Bucket::open("settings")?;
//! bucket.set("theme", b"dark", None)?;
//! ```
//!
//! A Rust guest is a plain `fn main()` program built for `wasm32-wasip2`;
//! the toolchain exports `wasi:cli/run` for it.

wit_bindgen::generate!({
    path: "../../wit",
    // Everything alk offers, plus the monotonic clock for timer pollables.
    inline: "
        package alk:guest;
        world guest {
            include alk:store/imports@0.1.4;
            import wasi:clocks/monotonic-clock@0.2.12;
        }
    ",
    world: "alk:guest/guest",
    generate_all,
});

pub use alk::store::kv;
pub use alk::store::limiter;
pub use alk::store::lock;
pub use alk::store::notify;
pub use alk::store::outbox;
pub use alk::store::queue;
pub use alk::store::schedule;
pub use alk::store::stream;
pub use alk::store::tx;
pub use alk::store::types::{Error, SetupFailure, TooLarge};
/// `wasi:io/poll`, to wait on several alk pollables at once.
pub use wasi::io::poll;

/// Runs contract cases: prints `ok <name>` for each passing case, and on the
/// first failure prints `FAIL <name>: <why>` and exits with status 1.
pub struct Contract {
    passed: usize,
}

impl Default for Contract {
    fn default() -> Self {
        Self::new()
    }
}

impl Contract {
    /// A fresh run.
    pub fn new() -> Self {
        Contract { passed: 0 }
    }

    /// Runs one case.
    pub fn case(&mut self, name: &str, f: impl FnOnce() -> Result<(), String>) {
        match f() {
            Ok(()) => {
                self.passed += 1;
                println!("ok {name}");
            }
            Err(why) => {
                println!("FAIL {name}: {why}");
                std::process::exit(1);
            }
        }
    }

    /// Prints the summary line.
    pub fn finish(self) {
        println!("{} passed, 0 failed", self.passed);
    }
}

/// Fails the case with the expression's text unless `cond` holds.
#[macro_export]
macro_rules! ensure {
    ($cond:expr) => {
        if !$cond {
            return Err(format!("ensure!({}) failed at line {}", stringify!($cond), line!()));
        }
    };
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(format!("ensure!({}) failed at line {}: {}", stringify!($cond), line!(), format!($($fmt)+)));
        }
    };
}

/// Fails the case unless `value` matches `pattern`, showing what it was.
#[macro_export]
macro_rules! ensure_matches {
    ($value:expr, $pattern:pat $(if $guard:expr)?) => {
        match $value {
            $pattern $(if $guard)? => {}
            other => {
                return Err(format!(
                    "{} = {:?}, expected {} (line {})",
                    stringify!($value), other, stringify!($pattern), line!()
                ))
            }
        }
    };
}

/// Unwraps an `Ok`, or fails the case naming the expression and the error.
#[macro_export]
macro_rules! ok {
    ($value:expr) => {
        match $value {
            Ok(v) => v,
            Err(e) => {
                return Err(format!(
                    "{} failed at line {}: {e:?}",
                    stringify!($value),
                    line!()
                ))
            }
        }
    };
}

/// Names that break the shared name rules, one per rule: empty, `.`, `..`,
/// a leading dot, path separators, NUL, a space, non-ASCII, 101 characters.
pub fn bad_names() -> Vec<String> {
    let mut names: Vec<String> = [
        "",
        ".",
        "..",
        ".hidden",
        "a/b",
        "a\\b",
        "a\0b",
        "with space",
        "ü",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    names.push("n".repeat(101));
    names
}

/// Helpers for small command-line guests (the test and benchmark tools).
pub mod tool {
    /// Prints an alk error as `error: <variant>` and exits with status 1.
    pub fn fail(e: crate::Error) -> ! {
        println!("error: {e:?}");
        std::process::exit(1);
    }

    /// Parses a number argument, or exits with status 2 saying why.
    pub fn num(s: &str) -> u64 {
        s.parse().unwrap_or_else(|_| {
            eprintln!("{s:?} is not a number");
            std::process::exit(2)
        })
    }
}
