//! C guests: bindings from wit-bindgen's C generator, compiled for
//! wasm32-wasi by zig's clang and wasi-libc, and made components with the
//! preview-1 command adapter of the host's wasmtime release.
//!
//! Zig comes from PyPI (`ziglang`, a pinned release) in a private
//! virtualenv under `target/c`; zig's caches live there too. The generator
//! and the component encoder are crates xtask depends on.
//!
//! Guests: `guest/contract/<interface>/c/*.c` becomes
//! `<interface>-contract-c.wasm` and `guest/c/<name>/*.c` becomes
//! `<name>-c.wasm`. Each binds world `kv-imports` of `wit/` with a plain
//! `main()`, unless a `world.txt` in its folder names another world.
//!
//! The README's C recipe runs the same steps as commands: `wit-bindgen c`,
//! `zig cc` and `wasm-tools component new` with the adapter file. For the
//! test that runs it (`tests/integration/guest_recipes.rs`) this module
//! also installs those two commands into `target/c/tools/bin` (from
//! crates.io, the releases matching the crates above) and writes the
//! adapter to `target/c/wasi_snapshot_preview1.command.wasm`.

use std::path::{Path, PathBuf};
use std::process::Command;

use wasi_preview1_component_adapter_provider::{
    WASI_SNAPSHOT_PREVIEW1_ADAPTER_NAME, WASI_SNAPSHOT_PREVIEW1_COMMAND_ADAPTER,
};
use wit_bindgen_core::wit_parser::Resolve;

use crate::Result;

/// The zig release C guests are compiled with, from PyPI.
const ZIGLANG: &str = "ziglang==0.15.2";

/// The world a C guest binds unless its `world.txt` names another.
const DEFAULT_WORLD: &str = "kv-imports";

/// Compiler flags for every C guest.
const CFLAGS: &[&str] = &[
    "--target=wasm32-wasi",
    "-std=gnu17",
    "-Os",
    "-s",
    "-Wall",
    "-Wextra",
    "-Werror",
];

/// Builds every C guest into `out`; installs the C recipe's tools.
pub(crate) fn build(root: &Path, out: &Path) -> Result<()> {
    ensure_recipe_tools()?;
    let guests = guests(root)?;
    if guests.is_empty() {
        return Ok(());
    }
    let mut zig: Option<Zig> = None;
    for (name, dir) in guests {
        let target = out.join(format!("{name}.wasm"));
        let marker = tool_dir().join(MARKER);
        if crate::is_fresh(&target, &[&dir, &root.join("wit"), &marker]) {
            continue;
        }
        let zig = match &zig {
            Some(z) => z,
            None => zig.insert(Zig::ensure()?),
        };
        let started = std::time::Instant::now();
        build_one(root, &name, &dir, &target, zig)?;
        let size = std::fs::metadata(&target).map(|m| m.len()).unwrap_or(0);
        eprintln!(
            "xtask: built {name}.wasm ({} KB) in {:.1} s",
            size / 1024,
            started.elapsed().as_secs_f64()
        );
    }
    Ok(())
}

/// The C guests as (built name, folder), sorted by name.
fn guests(root: &Path) -> Result<Vec<(String, PathBuf)>> {
    let mut found: Vec<(String, PathBuf)> = crate::subdirs(&root.join("guest/contract"))?
        .into_iter()
        .map(|p| (format!("{}-contract-c", crate::file_name(&p)), p.join("c")))
        .filter(|(_, p)| !c_files(p).is_empty())
        .collect();
    let own = root.join("guest/c");
    if own.is_dir() {
        found.extend(
            crate::subdirs(&own)?
                .into_iter()
                .filter(|p| !c_files(p).is_empty())
                .map(|p| (format!("{}-c", crate::file_name(&p)), p)),
        );
    }
    found.sort();
    Ok(found)
}

/// The `.c` files directly in `dir`, sorted (none when it does not exist).
fn c_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "c"))
        .collect();
    files.sort();
    files
}

/// One guest: bindings, compile and link, then the component.
fn build_one(root: &Path, name: &str, dir: &Path, target: &Path, zig: &Zig) -> Result<()> {
    let world = std::fs::read_to_string(dir.join("world.txt"))
        .map(|w| w.trim().to_string())
        .unwrap_or_else(|_| DEFAULT_WORLD.to_string());
    let work = tool_dir().join("build").join(name);
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).map_err(|e| format!("{}: {e}", work.display()))?;
    let generated = bindings(&root.join("wit"), &world, &work)
        .map_err(|e| format!("{name}: cannot generate C bindings for world {world:?}: {e}"))?;

    // The bindings' own sources (and the object file carrying the world's
    // type) are compiled and linked with the guest's.
    let core = work.join(format!("{name}.core.wasm"));
    let mut cc = zig.cc();
    cc.args(CFLAGS)
        .arg("-I")
        .arg(&work)
        .arg("-I")
        .arg(dir)
        .args(c_files(dir))
        .args(&generated)
        .arg("-o")
        .arg(&core);
    crate::run_quiet(&mut cc).map_err(|e| {
        format!(
            "{name}: compiling {} failed (the compiler's messages are above): {e}",
            dir.display()
        )
    })?;

    let module = std::fs::read(&core).map_err(|e| format!("{}: {e}", core.display()))?;
    let component = wit_component::ComponentEncoder::default()
        .validate(true)
        .module(&module)
        .and_then(|e| {
            e.adapter(
                WASI_SNAPSHOT_PREVIEW1_ADAPTER_NAME,
                WASI_SNAPSHOT_PREVIEW1_COMMAND_ADAPTER,
            )
        })
        .and_then(|mut e| e.encode())
        .map_err(|e| {
            format!(
                "{name}: cannot make a component of {} (a C guest needs a `main` function and may import only what world {world:?} and wasi-libc offer): {e:#}",
                core.display()
            )
        })?;
    std::fs::write(target, component).map_err(|e| format!("{}: {e}", target.display()))
}

/// Writes wit-bindgen's C bindings of `world` in `wit` into `work`; the
/// files to compile and link (the `.c` and the type object).
fn bindings(wit: &Path, world: &str, work: &Path) -> Result<Vec<PathBuf>> {
    let mut resolve = Resolve::default();
    let (package, _) = resolve.push_path(wit).map_err(|e| format!("{e:#}"))?;
    let world = resolve
        .select_world(&[package], Some(world))
        .map_err(|e| format!("{e:#}"))?;
    let mut files = wit_bindgen_core::Files::default();
    wit_bindgen_c::Opts::default()
        .build()
        .generate(&mut resolve, world, &mut files)
        .map_err(|e| format!("{e:#}"))?;
    let mut linked = Vec::new();
    for (file, contents) in files.iter() {
        let path = work.join(file);
        std::fs::write(&path, contents).map_err(|e| format!("{}: {e}", path.display()))?;
        if file.ends_with(".c") || file.ends_with(".o") {
            linked.push(path);
        }
    }
    Ok(linked)
}

/// Where the C toolchain lives: `target/c`.
fn tool_dir() -> PathBuf {
    crate::target_dir().join("c")
}

/// The commands of the README's C recipe, as `cargo install` arguments:
/// the wit-bindgen release of `wit-bindgen-c` above with its C generator
/// only, and the wasm-tools release of the `wit-component` above with its
/// `component` commands only (the rest would only lengthen the build).
const RECIPE_TOOLS: &[&[&str]] = &[
    &[
        "wit-bindgen-cli@0.60.0",
        "--no-default-features",
        "--features",
        "c",
    ],
    &[
        "wasm-tools@1.254.2",
        "--no-default-features",
        "--features",
        "component",
    ],
];

/// The file naming the installed recipe tools, in `target/c/tools`.
const TOOLS_MARKER: &str = "installed.txt";

/// Installs the C recipe's `wit-bindgen` and `wasm-tools` into
/// `target/c/tools/bin` unless the ones there are the pinned releases,
/// writes the preview-1 command adapter into `target/c`, and installs zig.
fn ensure_recipe_tools() -> Result<()> {
    // The recipe compiles with the same zig.
    Zig::ensure()?;
    let dir = tool_dir();
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let adapter = dir.join(WASI_SNAPSHOT_PREVIEW1_ADAPTER_NAME.to_string() + ".command.wasm");
    if std::fs::read(&adapter).ok().as_deref() != Some(WASI_SNAPSHOT_PREVIEW1_COMMAND_ADAPTER) {
        std::fs::write(&adapter, WASI_SNAPSHOT_PREVIEW1_COMMAND_ADAPTER)
            .map_err(|e| format!("{}: {e}", adapter.display()))?;
    }
    let tools = dir.join("tools");
    let marker = tools.join(TOOLS_MARKER);
    let pins = RECIPE_TOOLS
        .iter()
        .map(|args| args.join(" "))
        .collect::<Vec<_>>()
        .join("\n");
    let present = ["wit-bindgen", "wasm-tools"]
        .iter()
        .all(|bin| tools.join("bin").join(bin).exists());
    if present && std::fs::read_to_string(&marker).ok().as_deref() == Some(pins.as_str()) {
        return Ok(());
    }
    let _ = std::fs::remove_file(&marker);
    let build = dir.join("tools-build");
    let started = std::time::Instant::now();
    for args in RECIPE_TOOLS {
        crate::run(
            crate::cargo()
                .args(["install", "--quiet", "--locked", "--force", "--root"])
                .arg(&tools)
                .arg("--target-dir")
                .arg(&build)
                .args(*args),
        )
        .map_err(|e| {
            format!(
                "{e}\ninstalling {} failed: check that crates.io can be reached (cargo's proxy \
                 and registry settings apply), then run `cargo xtask guests` again",
                args[0]
            )
        })?;
    }
    // Only the two binaries are kept.
    let _ = std::fs::remove_dir_all(&build);
    std::fs::write(&marker, &pins).map_err(|e| format!("{}: {e}", marker.display()))?;
    eprintln!(
        "xtask: installed wit-bindgen and wasm-tools into {} in {:.0} s",
        tools.join("bin").display(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The file naming the installed zig release.
const MARKER: &str = "installed.txt";

/// zig, installed from PyPI into a virtualenv of its own.
struct Zig {
    python: PathBuf,
    cache: PathBuf,
}

impl Zig {
    /// The pinned zig, installed on first use (and when the pin changes);
    /// nothing is installed globally.
    fn ensure() -> Result<Zig> {
        let dir = tool_dir();
        let venv = dir.join("venv");
        let zig = Zig {
            python: venv.join("bin/python"),
            cache: dir.join("zig-cache"),
        };
        let marker = dir.join(MARKER);
        if zig.python.exists() && std::fs::read_to_string(&marker).ok().as_deref() == Some(ZIGLANG)
        {
            return Ok(zig);
        }
        let started = std::time::Instant::now();
        let _ = std::fs::remove_dir_all(&venv);
        let _ = std::fs::remove_dir_all(&zig.cache);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
        crate::run(Command::new(&python).args(["-m", "venv"]).arg(&venv)).map_err(|e| {
            format!("cannot make a virtualenv for the C toolchain ({e}); install Python 3 with venv (Debian: python3-venv), or name the interpreter in PYTHON")
        })?;
        crate::run(Command::new(&zig.python).args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            ZIGLANG,
        ]))
        .map_err(|e| {
            format!("cannot install {ZIGLANG} from PyPI ({e}); check that PyPI can be reached (pip's proxy and index settings apply), then run `cargo xtask guests` again")
        })?;
        // zig builds wasi-libc on first use; do it now so the first guest's
        // build time is its own.
        let probe = dir.join("probe.c");
        std::fs::write(&probe, "int main(void) { return 0; }\n").map_err(|e| e.to_string())?;
        crate::run_quiet(
            zig.cc()
                .args(CFLAGS)
                .arg(&probe)
                .arg("-o")
                .arg(dir.join("probe.wasm")),
        )
        .map_err(|e| format!("{ZIGLANG} cannot compile for wasm32-wasi: {e}"))?;
        std::fs::write(&marker, ZIGLANG).map_err(|e| e.to_string())?;
        eprintln!(
            "xtask: installed {ZIGLANG} into {} in {:.0} s",
            dir.display(),
            started.elapsed().as_secs_f64()
        );
        Ok(zig)
    }

    /// `zig cc`, with zig's caches under `target/c`.
    fn cc(&self) -> Command {
        let mut cmd = Command::new(&self.python);
        cmd.args(["-m", "ziglang", "cc"])
            .env("ZIG_GLOBAL_CACHE_DIR", &self.cache)
            .env("ZIG_LOCAL_CACHE_DIR", &self.cache);
        cmd
    }
}
