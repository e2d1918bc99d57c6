//! JavaScript guests: built with componentize-js (the StarlingMonkey engine
//! ships inside its npm package), installed from npm under `target/js` at
//! the versions `guest/js/toolchain/package-lock.json` pins.
//!
//! - `guest/js/<name>/app.js` → `<name>-js.wasm`, world `command` (every
//!   alk interface);
//! - `guest/contract/<interface>/js/app.js` → `<interface>-contract-js.wasm`,
//!   world `<interface>-command`.
//!
//! A guest folder may name another world in `world.txt`. The guest exports
//! `run` (`export const run = { run() { … } }`); a `run` that throws makes
//! the component exit with status 1.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{Result, file_name, is_fresh, run, subdirs};

/// The committed toolchain: `package.json` and its lock.
const TOOLCHAIN: &str = "guest/js/toolchain";

/// The world of a guest under `guest/js` without a `world.txt`.
const DEFAULT_WORLD: &str = "command";

/// Builds every JavaScript guest into `out`.
pub(crate) fn build(root: &Path, out: &Path) -> Result<()> {
    let mut guests: Vec<(String, PathBuf, String)> = Vec::new();
    let own = root.join("guest/js");
    if own.is_dir() {
        for dir in subdirs(&own)? {
            if dir.join("app.js").exists() {
                guests.push((format!("{}-js", file_name(&dir)), dir, DEFAULT_WORLD.into()));
            }
        }
    }
    for iface in subdirs(&root.join("guest/contract"))? {
        let dir = iface.join("js");
        if dir.join("app.js").exists() {
            let name = file_name(&iface);
            guests.push((
                format!("{name}-contract-js"),
                dir,
                format!("{name}-command"),
            ));
        }
    }
    guests.sort();
    if guests.is_empty() {
        return Ok(());
    }
    let toolchain = root.join(TOOLCHAIN);
    let mut componentize: Option<PathBuf> = None;
    for (name, dir, default_world) in guests {
        let target = out.join(format!("{name}.wasm"));
        if is_fresh(&target, &[&dir, &root.join("wit"), &toolchain]) {
            continue;
        }
        let cli = match &componentize {
            Some(cli) => cli.clone(),
            None => componentize.insert(ensure_componentize_js(root)?).clone(),
        };
        let world = std::fs::read_to_string(dir.join("world.txt"))
            .map(|w| w.trim().to_string())
            .unwrap_or(default_world);
        // `-d http fetch-event`: the guest is a command, not an HTTP
        // handler, so the component neither imports wasi:http nor exports
        // its handler.
        run(Command::new("node")
            .current_dir(&dir)
            .arg(&cli)
            .arg("app.js")
            .arg("--wit")
            .arg(root.join("wit"))
            .args(["--world-name", &world, "-d", "http", "fetch-event", "-o"])
            .arg(&target))
        .map_err(|e| {
            format!(
                "{e}\nbuilding {} failed: fix the error above in {}/app.js, or check that \
                 world {world:?} is in wit/ (a guest names its world in world.txt)",
                target.display(),
                dir.display()
            )
        })?;
    }
    Ok(())
}

/// Installs the pinned toolchain into `target/js` unless the lock it was
/// installed from is the committed one; the componentize-js command.
fn ensure_componentize_js(root: &Path) -> Result<PathBuf> {
    let prefix = crate::target_dir().join("js");
    let cli = prefix.join("node_modules/@bytecodealliance/componentize-js/src/cli.js");
    let marker = prefix.join("installed.json");
    let source = root.join(TOOLCHAIN);
    let lock = std::fs::read(source.join("package-lock.json"))
        .map_err(|e| format!("{TOOLCHAIN}/package-lock.json: {e}"))?;
    if cli.exists() && std::fs::read(&marker).ok().as_deref() == Some(lock.as_slice()) {
        return Ok(cli);
    }
    for (tool, what) in [("node", "Node.js"), ("npm", "npm")] {
        if Command::new(tool).arg("--version").output().is_err() {
            return Err(format!(
                "JavaScript guests need {what} (`{tool}` on PATH; tested with Node.js 20): \
                 install it (Debian: `apt-get install nodejs npm`) and run again"
            ));
        }
    }
    std::fs::create_dir_all(&prefix).map_err(|e| format!("{}: {e}", prefix.display()))?;
    // A changed lock invalidates the install until `npm ci` succeeds.
    let _ = std::fs::remove_file(&marker);
    for file in ["package.json", "package-lock.json"] {
        std::fs::copy(source.join(file), prefix.join(file))
            .map_err(|e| format!("cannot copy {TOOLCHAIN}/{file}: {e}"))?;
    }
    // Exactly the locked versions; none of them needs an install script.
    run(Command::new("npm")
        .arg("ci")
        .arg("--prefix")
        .arg(&prefix)
        .args([
            "--ignore-scripts",
            "--no-audit",
            "--no-fund",
            "--loglevel=error",
        ]))
    .map_err(|e| {
        format!(
            "{e}\ninstalling the JavaScript toolchain failed: check that the npm registry is \
             reachable, then run again; after changing {TOOLCHAIN}/package.json, refresh its \
             lock with `npm install --package-lock-only` in that folder"
        )
    })?;
    if !cli.exists() {
        return Err(format!(
            "npm ci did not install {}: is @bytecodealliance/componentize-js still in {TOOLCHAIN}/package.json?",
            cli.display()
        ));
    }
    std::fs::write(&marker, &lock).map_err(|e| format!("{}: {e}", marker.display()))?;
    Ok(cli)
}
