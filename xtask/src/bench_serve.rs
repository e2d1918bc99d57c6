//! The `serve` rows of `cargo xtask bench`: requests per second and
//! latency of HTTP handlers under `alk-host serve` and `wasmtime serve`,
//! the same component (`http-bench`) on both, loaded by `alk-bench
//! http-load` on 127.0.0.1 in the same run.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use crate::Result;

/// Runs per cell, the two hosts taking turns.
const RUNS: usize = 3;
/// Keep-alive connections of the load.
const CONNECTIONS: usize = 16;

/// What one load run measured.
#[derive(Clone, Copy)]
struct Load {
    rps: f64,
    p50_ms: f64,
    p99_ms: f64,
}

/// A server being measured.
struct Server {
    child: Child,
    addr: String,
}

impl Server {
    /// Starts `cmd` (which must print `Serving HTTP on http://ADDR/` to
    /// stderr) and waits for that line.
    fn start(mut cmd: Command) -> Result<Server> {
        let mut child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start {cmd:?}: {e}"))?;
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let addr = loop {
            match lines.next() {
                Some(Ok(line)) => {
                    if let Some(rest) = line.split("Serving HTTP on http://").nth(1) {
                        break rest.trim_end_matches('/').to_string();
                    }
                }
                _ => return Err(format!("{cmd:?} stopped before serving")),
            }
        };
        // Drain the rest so the server never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines.map_while(std::result::Result::ok) {});
        Ok(Server { child, addr })
    }

    fn stop(mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

fn load(native: &Path, addr: &str, method: &str, path: &str, requests: usize) -> Result<Load> {
    let out = Command::new(native)
        .args(["http-load", addr, method, path])
        .arg(CONNECTIONS.to_string())
        .arg(requests.to_string())
        .output()
        .map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&out.stdout);
    let f: Vec<f64> = text
        .lines()
        .find_map(|l| l.strip_prefix("http "))
        .ok_or_else(|| format!("http-load printed {text:?}: {}", String::from_utf8_lossy(&out.stderr)))?
        .split(' ')
        .filter_map(|x| x.parse().ok())
        .collect();
    let [n, elapsed_us, p50, p99, failed] = f[..] else {
        return Err(format!("bad http-load line {text:?}"));
    };
    if failed > 0.0 {
        return Err(format!("{failed} of {n} requests to {addr}{path} failed"));
    }
    Ok(Load {
        rps: n / (elapsed_us / 1e6),
        p50_ms: p50 / 1000.0,
        p99_ms: p99 / 1000.0,
    })
}

/// One server start, a warm-up, one measured load.
fn measure(native: &Path, cmd: Command, method: &str, path: &str, n: usize) -> Result<Load> {
    let server = Server::start(cmd)?;
    let result = load(native, &server.addr, method, path, 200)
        .and_then(|_| load(native, &server.addr, method, path, n));
    server.stop();
    result
}

fn median(mut v: Vec<Load>) -> Load {
    let pick = |v: &mut Vec<Load>, f: fn(&Load) -> f64| {
        v.sort_by(|a, b| f(a).total_cmp(&f(b)));
        f(&v[v.len() / 2])
    };
    Load {
        rps: pick(&mut v, |l| l.rps),
        p50_ms: pick(&mut v, |l| l.p50_ms),
        p99_ms: pick(&mut v, |l| l.p99_ms),
    }
}

/// The markdown section.
pub fn section(
    host_bin: &Path,
    native: &Path,
    wasmtime: &Path,
    guests: &Path,
    postgres_url: &str,
) -> Result<String> {
    let component = guests.join("http-bench.wasm");
    let cache = crate::target_dir().join("bench-cache");
    let (wcache, _) = crate::bench::wasmtime_cache()?;
    let alk = |store: Vec<String>| {
        let mut c = Command::new(host_bin);
        c.arg("serve")
            .arg(&component)
            .args(["--addr", "127.0.0.1:0", "--cache-dir"])
            .arg(&cache)
            .args(store);
        c
    };
    let wt = || {
        let mut c = Command::new(wasmtime);
        c.args(["serve", "--addr", "127.0.0.1:0", "-S", "cli", "-S", "keyvalue", "-C"])
            .arg(format!("cache-config={}", wcache.display()))
            .arg(&component);
        c
    };
    let fresh = |name: &str| -> Result<Vec<String>> {
        let dir = crate::target_dir().join("bench").join(name);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        Ok(vec!["--data-dir".into(), dir.display().to_string()])
    };
    let mut md = String::from(
        "## Serving HTTP\n\nThe same component (`http-bench`: `GET /` answers without storage, `POST /incr` increments a `wasi:keyvalue`\ncounter) under `alk-host serve` and `wasmtime serve -S cli -S keyvalue` (the wasmtime CLI from PyPI, whose keyvalue\nis in memory and per instance: its counter never counts past 1), loaded on 127.0.0.1 by `alk-bench http-load <addr>\n<method> <path> 16 <n>`: 16 keep-alive connections, each sending its next request when the last is answered, `n`\nrequests in all, after 200 untimed. Each cell: a fresh server per run, the hosts taking turns, median of 3 runs.\nThe load generator runs on the same two cores as the server.\n\n| handler | requests | host | requests/s | p50 ms | p99 ms | alk ÷ wasmtime |\n|---|---|---|---|---|---|---|\n",
    );
    let cells: Vec<(&str, &str, &str, usize, Vec<(String, Box<dyn Fn() -> Result<Command>>)>)> = vec![
        (
            "`GET /`, no storage",
            "GET",
            "/",
            5_000,
            vec![(
                "alk-host serve".to_string(),
                Box::new(move || Ok(alk(vec!["--data-dir".into(), crate::target_dir().join("bench/serve-hello").display().to_string()]))),
            )],
        ),
        (
            "`POST /incr`, kv increment",
            "POST",
            "/incr",
            2_000,
            vec![
                (
                    "alk-host serve, files, full".to_string(),
                    Box::new(move || Ok(alk(fresh("serve-full")?))),
                ),
                (
                    "alk-host serve, files, relaxed".to_string(),
                    Box::new(move || {
                        let mut args = fresh("serve-relaxed")?;
                        args.extend(["--durability".into(), "relaxed".into()]);
                        Ok(alk(args))
                    }),
                ),
                (
                    "alk-host serve, Postgres".to_string(),
                    Box::new(move || {
                        let schema = format!("serve_{}", std::process::id());
                        let sep = if postgres_url.contains('?') { '&' } else { '?' };
                        Ok(alk(vec![
                            "--store".into(),
                            format!("{postgres_url}{sep}schema={schema}"),
                        ]))
                    }),
                ),
            ],
        ),
    ];
    for (label, method, path, n, hosts) in cells {
        eprintln!("bench: serve {label}");
        let mut wasmtime_runs = Vec::new();
        let mut alk_runs: Vec<Vec<Load>> = vec![Vec::new(); hosts.len()];
        for _ in 0..RUNS {
            for (i, (_, make)) in hosts.iter().enumerate() {
                alk_runs[i].push(measure(native, make()?, method, path, n)?);
            }
            wasmtime_runs.push(measure(native, wt(), method, path, n)?);
        }
        let w = median(wasmtime_runs);
        for ((name, _), runs) in hosts.iter().zip(alk_runs) {
            let a = median(runs);
            md.push_str(&format!(
                "| {label} | {n} | {name} | {:.0} | {:.2} | {:.2} | {:.2} |\n",
                a.rps,
                a.p50_ms,
                a.p99_ms,
                a.rps / w.rps
            ));
        }
        md.push_str(&format!(
            "| {label} | {n} | wasmtime serve | {:.0} | {:.2} | {:.2} | |\n",
            w.rps, w.p50_ms, w.p99_ms
        ));
    }
    Ok(md)
}
