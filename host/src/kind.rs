//! What a component is — a command (`wasi:cli/run`), an HTTP handler
//! (`wasi:http/incoming-handler`), neither, or not a component at all —
//! and the one line that tells its user what to do with it.

use std::path::Path;

use wasmtime::Engine;
use wasmtime::component::Component;

/// The export that makes a component a command (any 0.2 release).
const RUN: &str = "wasi:cli/run@0.2.";
/// The export that makes a component an HTTP handler (any 0.2 release).
const HANDLER: &str = "wasi:http/incoming-handler@0.2.";

/// What a component exports that a host can call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// It exports `wasi:cli/run`: `alk-host run` runs it.
    Command,
    /// It exports `wasi:http/incoming-handler`: `alk-host serve` serves it.
    HttpHandler,
    /// It exports both: `run` runs it and `serve` serves it.
    Both,
    /// It exports neither; what it exports.
    Neither(Vec<String>),
}

/// The kind of `component`, from its exports (without instantiating it).
pub(crate) fn kind_of(engine: &Engine, component: &Component) -> Kind {
    let exports: Vec<String> = component
        .component_type()
        .exports(engine)
        .map(|(name, _)| name.to_string())
        .collect();
    let run = exports.iter().any(|e| e.starts_with(RUN));
    let handler = exports.iter().any(|e| e.starts_with(HANDLER));
    match (run, handler) {
        (true, true) => Kind::Both,
        (true, false) => Kind::Command,
        (false, true) => Kind::HttpHandler,
        (false, false) => Kind::Neither(exports),
    }
}

/// Refuses a component of another kind than `wanted`, saying what it is
/// and what runs it.
pub(crate) fn require(found: Kind, wanted: Kind) -> wasmtime::Result<()> {
    if found == wanted || found == Kind::Both {
        return Ok(());
    }
    let what = match (&found, &wanted) {
        (Kind::HttpHandler, Kind::Command) => {
            "the component exports wasi:http/incoming-handler: it is an HTTP handler, not a command; serve it with `alk-host serve`".to_string()
        }
        (Kind::Command, Kind::HttpHandler) => {
            "the component exports wasi:cli/run: it is a command, not an HTTP handler; run it with `alk-host run`".to_string()
        }
        (Kind::Neither(exports), _) => {
            let exports = if exports.is_empty() {
                "nothing".to_string()
            } else {
                exports.join(", ")
            };
            format!(
                "the component exports neither wasi:cli/run (a command, for `alk-host run`) nor wasi:http/incoming-handler (an HTTP handler, for `alk-host serve`); it exports {exports}"
            )
        }
        _ => format!("the component is a {found:?}, not a {wanted:?}"),
    };
    Err(wasmtime::format_err!("{what}"))
}

/// Refuses bytes that are a core WebAssembly module rather than a
/// component, before the compiler says something less helpful.
pub(crate) fn check_bytes(path: &Path, bytes: &[u8]) -> wasmtime::Result<()> {
    // A binary starts with `\0asm` and a version: 1 for a core module, a
    // layer of 1 (bytes 6..8) for a component.
    if bytes.len() >= 8 && &bytes[..4] == b"\0asm" && bytes[4..8] == [1, 0, 0, 0] {
        wasmtime::bail!(
            "{} is a core WebAssembly module, not a component: build it for a component target (for Rust, --target wasm32-wasip2) or wrap it with `wasm-tools component new`",
            path.display()
        );
    }
    Ok(())
}

/// The interface named by an instantiation error that found an import
/// missing, in a line that says alk does not provide it; other errors as
/// they are.
pub(crate) fn explain_instantiate(e: wasmtime::Error) -> wasmtime::Error {
    let text = format!("{e:#}");
    if let Some(rest) = text.split("component imports instance `").nth(1)
        && let Some(name) = rest.split('`').next()
    {
        return wasmtime::format_err!(
            "the component imports {name}, which alk-host does not provide (it provides WASI 0.2, wasi:http, wasi:keyvalue 0.2.0-draft and -draft2, and alk:store)"
        );
    }
    if let Some(rest) = text.split("component imports ").nth(1)
        && let Some(what) = rest.split(", but").next()
    {
        return wasmtime::format_err!(
            "the component imports {what}, which alk-host does not provide"
        );
    }
    e.context("cannot instantiate the component")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_core_module_is_told_apart_from_a_component() {
        let core = b"\0asm\x01\x00\x00\x00";
        let e = check_bytes(Path::new("m.wasm"), core).unwrap_err();
        assert!(e.to_string().contains("core WebAssembly module"), "{e}");
        let component = b"\0asm\x0d\x00\x01\x00";
        assert!(check_bytes(Path::new("c.wasm"), component).is_ok());
    }

    #[test]
    fn each_wrong_kind_says_what_runs_it() {
        let e = require(Kind::HttpHandler, Kind::Command).unwrap_err();
        assert!(e.to_string().contains("alk-host serve"), "{e}");
        let e = require(Kind::Command, Kind::HttpHandler).unwrap_err();
        assert!(e.to_string().contains("alk-host run"), "{e}");
        let e = require(Kind::Neither(vec!["x:y/z".into()]), Kind::Command).unwrap_err();
        assert!(e.to_string().contains("it exports x:y/z"), "{e}");
        // A component exporting both is run by one and served by the other.
        assert!(require(Kind::Both, Kind::Command).is_ok());
        assert!(require(Kind::Both, Kind::HttpHandler).is_ok());
    }
}
