//! The stores of a data directory, as operators' tools list them
//! ([`alk_store::Catalog`]): found by reading the directory and each file's
//! format marker with [`crate::inspect`], which opens nothing in the engine
//! and cannot change a file. Only the stream store, when it exists, is
//! opened (through the one open path) to list its streams.

use std::path::Path;

use alk_store::names::check_name;
use alk_store::{AlkError, AlkResult, Catalog};

use crate::inspect::{Contents, inspect};

/// What one store file is, for the catalog.
enum Found {
    /// An alk store of the family (`localkv`, …) asked for.
    Store,
    /// No file, or one with nothing in it yet.
    Nothing,
    /// Anything else; why.
    Unreadable(String),
}

fn examine(path: &Path, family: &str) -> Found {
    match inspect(path) {
        Ok(Contents::Fresh) => Found::Nothing,
        Ok(Contents::Marker(m)) if m.split('.').next() == Some(family) => Found::Store,
        Ok(Contents::Marker(m)) => {
            Found::Unreadable(format!("holds format {m:?}, not a {family} store"))
        }
        Ok(Contents::Foreign(tables)) => Found::Unreadable(format!(
            "another program's database (tables: {})",
            tables.join(", ")
        )),
        Ok(Contents::NotADatabase(why)) => Found::Unreadable(format!("not a database: {why}")),
        Err(e) => Found::Unreadable(format!("cannot be read: {e}")),
    }
}

/// The stores named by the folders of `dir` (`kv/`, `queue/`), each
/// holding `file` of `family`; what is wrong with the others goes to
/// `unreadable`.
fn folders(
    dir: &Path,
    kind: &str,
    file: &str,
    family: &str,
    unreadable: &mut Vec<(String, String)>,
) -> AlkResult<Vec<String>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => {
            return Err(AlkError::Internal(format!(
                "cannot list {}: {e}",
                dir.display()
            )));
        }
    };
    let mut names = Vec::new();
    for entry in entries {
        let entry =
            entry.map_err(|e| AlkError::Internal(format!("cannot list {}: {e}", dir.display())))?;
        let path = entry.path();
        let Some(name) = entry.file_name().to_str().map(str::to_string) else {
            unreadable.push((path.display().to_string(), "its name is not UTF-8".into()));
            continue;
        };
        if !path.is_dir() {
            continue;
        }
        if let Err(e) = check_name(kind, &name) {
            unreadable.push((path.display().to_string(), format!("not a store name: {e}")));
            continue;
        }
        let store = path.join(file);
        match examine(&store, family) {
            Found::Store => names.push(name),
            Found::Nothing => {}
            Found::Unreadable(why) => unreadable.push((store.display().to_string(), why)),
        }
    }
    names.sort();
    Ok(names)
}

/// Lists what `data_dir` holds; `streams` lists the stream store's
/// streams, called only when that store exists.
pub(crate) async fn catalog<F, Fut>(data_dir: &Path, streams: F) -> AlkResult<Catalog>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = AlkResult<Vec<String>>>,
{
    let mut c = Catalog::default();
    let mut unreadable = Vec::new();
    c.buckets = folders(
        &data_dir.join("kv"),
        "bucket",
        "localkv.sqlite",
        "localkv",
        &mut unreadable,
    )?;
    c.queues = folders(
        &data_dir.join("queue"),
        "queue",
        "localqueue.sqlite",
        "localqueue",
        &mut unreadable,
    )?;
    let mut single = |path: &Path, family: &str| match examine(path, family) {
        Found::Store => true,
        Found::Nothing => false,
        Found::Unreadable(why) => {
            unreadable.push((path.display().to_string(), why));
            false
        }
    };
    c.stream_store = single(&crate::stream::stream_path(data_dir), "localstream");
    c.lock_store = single(&crate::lock::lock_path(data_dir), "locallock");
    if c.stream_store {
        c.streams = streams().await?;
    }
    c.unreadable = unreadable;
    Ok(c)
}
