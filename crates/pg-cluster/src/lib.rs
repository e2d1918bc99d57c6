//! Throwaway PostgreSQL clusters for alk's tests, benchmarks and CI.
//!
//! [`Cluster::start`] runs `initdb` in a fresh directory under the system's
//! temporary directory and starts a server on a free port of 127.0.0.1, with
//! a superuser `alk` whose password is new for every cluster
//! ([`PASSWORD_PREFIX`] followed by random hex digits). Durability is traded
//! for speed (`fsync` and `full_page_writes` are off): the data lives only
//! as long as the cluster. [`test_url`] is the server the tests connect to.
//!
//! The server binaries are found in `ALK_PG_BIN` when set, else in the
//! newest `/usr/lib/postgresql/<version>/bin` (Debian's `postgresql`
//! package), else where `pg_config --bindir` or `PATH` points.
//!
//! The server refuses to run as root. A root process (the usual case in CI
//! and containers) runs `initdb` and `pg_ctl` as the `postgres` user, or
//! `nobody` when there is none, through `runuser` (or `setpriv`).
//!
//! Clean-up: dropping a [`Cluster`] stops its server and removes its
//! directory. A process may also end without dropping it (a static is never
//! dropped, a process may be killed), so every cluster has a watchdog: a
//! small detached shell process that waits for the process that started the
//! cluster to end, then stops the server and removes the directory.

use std::fs::{DirBuilder, OpenOptions};
use std::hash::{BuildHasher, Hasher, RandomState};
use std::io::Write as _;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The superuser every cluster is made with.
pub const SUPERUSER: &str = "alk";

/// How every cluster's password starts; the rest is random hex digits.
/// Tests can search logs and error messages for it to make sure no
/// password leaks.
pub const PASSWORD_PREFIX: &str = "alk-test-secret-";

/// The environment variable naming the server tests use (see [`test_url`]).
pub const TEST_URL_VAR: &str = "ALK_TEST_POSTGRES";

/// The environment variable naming a directory of PostgreSQL server
/// binaries (see [`bin_dir`]).
pub const BIN_VAR: &str = "ALK_PG_BIN";

/// The server tools a binary directory must have.
const SERVER_TOOLS: [&str; 2] = ["initdb", "pg_ctl"];

const NO_BINARIES: &str = "no PostgreSQL server binaries found (initdb, pg_ctl): install Debian's `postgresql` package or set ALK_PG_BIN";

/// How long `pg_ctl` may wait for the server to start or stop, in seconds.
const PG_CTL_WAIT_SECS: &str = "60";

/// How many lines of a command's output or of the server log errors quote.
const TAIL_LINES: usize = 20;

/// How often the first start is tried with another port when the one picked
/// was taken in the meantime.
const PORT_ATTEMPTS: usize = 3;

/// The watchdog: `$1` is the process the cluster belongs to, `$2` the
/// cluster's directory, `$3` its data directory and the remaining arguments
/// the `pg_ctl` command (behind `runuser` or `setpriv` for root). It checks
/// every second; when the directory is gone, [`Cluster`]'s `Drop` has
/// cleaned up and it ends quietly, when the process is gone it cleans up.
/// Hang-ups and interrupts (Ctrl-C in a terminal) are ignored: they are
/// meant for the process it watches.
const WATCHDOG: &str = r#"trap '' HUP INT
owner=$1 dir=$2 data=$3
shift 3
while kill -0 "$owner" 2>/dev/null && [ -d "$dir" ]; do sleep 1; done
[ -d "$dir" ] || exit 0
"$@" stop -D "$data" -m immediate -w -t 30 >/dev/null 2>&1
rm -rf "$dir"
"#;

/// A PostgreSQL server with its own data, in a temporary directory, for as
/// long as the value lives.
///
/// The directory holds the data directory (`data/`), the server log
/// (`server.log`) and the server's Unix socket, which only the server's
/// user (and root) can reach.
#[derive(Debug)]
pub struct Cluster {
    /// The temporary directory of the cluster.
    dir: PathBuf,
    /// The data directory (`dir/data`).
    data: PathBuf,
    /// The server log (`dir/server.log`).
    log: PathBuf,
    /// Where `initdb` and `pg_ctl` are.
    bin: PathBuf,
    /// Whom `initdb` and `pg_ctl` run as.
    run_as: RunAs,
    /// The TCP port on 127.0.0.1.
    port: u16,
    /// The superuser's password.
    password: String,
    /// The watchdog process (see [`WATCHDOG`]).
    watchdog: Option<Child>,
}

impl Cluster {
    /// Creates a cluster in a new temporary directory and starts its server;
    /// returns once the server accepts connections (about a second).
    ///
    /// The error says which step failed, with the end of that command's
    /// output and of the server log.
    pub fn start() -> Result<Cluster, String> {
        Self::start_for(std::process::id())
    }

    /// [`Cluster::start`] with a watchdog that cleans up once process
    /// `owner` has ended.
    fn start_for(owner: u32) -> Result<Cluster, String> {
        let bin = bin_dir()?;
        let run_as = RunAs::detect()?;
        let dir = temp_dir()?;
        let mut cluster = Cluster {
            data: dir.join("data"),
            log: dir.join("server.log"),
            dir,
            bin,
            run_as,
            port: 0,
            password: new_password(),
            watchdog: None,
        };
        // From here on, dropping `cluster` cleans up whatever was made.
        cluster.run_as.chown(&cluster.dir)?;
        cluster.spawn_watchdog(owner)?;
        cluster.init()?;
        let mut attempt = 1;
        loop {
            cluster.port = free_port()?;
            cluster.append_config(&format!("port = {}\n", cluster.port))?;
            let log_before = std::fs::metadata(&cluster.log).map_or(0, |m| m.len());
            match cluster.pg_start() {
                Ok(()) => return Ok(cluster),
                // Another process took the port between picking and binding.
                Err(_) if attempt < PORT_ATTEMPTS && cluster.port_was_taken(log_before) => {
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// The URL to connect with as the superuser:
    /// `postgres://alk:<password>@127.0.0.1:<port>/postgres`.
    pub fn url(&self) -> String {
        format!(
            "postgres://{SUPERUSER}:{}@127.0.0.1:{}/postgres",
            self.password, self.port
        )
    }

    /// The superuser's password.
    pub fn password(&self) -> &str {
        &self.password
    }

    /// The server's TCP port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Stops the server (`pg_ctl stop -m fast`: open connections are closed);
    /// returns once it is gone. The data is kept for [`Cluster::restart`].
    pub fn stop(&self) -> Result<(), String> {
        let mut cmd = self.tool("pg_ctl");
        cmd.args(["stop", "-m", "fast", "-w", "-t", PG_CTL_WAIT_SECS])
            .arg("-D")
            .arg(&self.data);
        self.run("pg_ctl stop", cmd).map(drop)
    }

    /// Starts the server again after [`Cluster::stop`], on the same port and
    /// with the same data; returns once it accepts connections.
    pub fn restart(&self) -> Result<(), String> {
        self.pg_start()
    }

    /// A command running `tool` of the binary directory as the server's
    /// user, in the cluster's directory.
    fn tool(&self, tool: &str) -> Command {
        let mut cmd = self.run_as.command(&self.bin.join(tool));
        cmd.current_dir(&self.dir).stdin(Stdio::null());
        cmd
    }

    /// Runs `cmd` (described as `what`) to its end; its output, or an error
    /// with the end of its output and of the server log.
    fn run(&self, what: &str, mut cmd: Command) -> Result<String, String> {
        let out = cmd
            .output()
            .map_err(|e| format!("cannot run {what} ({cmd:?}): {e}"))?;
        let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.push_str(&String::from_utf8_lossy(&out.stderr));
        if out.status.success() {
            Ok(text)
        } else {
            Err(self.failure(&format!("{what} failed ({})", out.status), &text))
        }
    }

    /// An error message: what failed, the end of the command's output and
    /// of the server log, and where the binaries came from.
    fn failure(&self, what: &str, output: &str) -> String {
        let mut msg = format!("throwaway PostgreSQL cluster: {what}");
        if !output.trim().is_empty() {
            msg.push_str(&format!("\n--- output ---\n{}", tail(output)));
        }
        if let Ok(log) = std::fs::read_to_string(&self.log)
            && !log.trim().is_empty()
        {
            msg.push_str(&format!("\n--- server log ---\n{}", tail(&log)));
        }
        msg.push_str(&format!(
            "\n(binaries from {}: Debian's `postgresql` package provides them, {BIN_VAR} selects others)",
            self.bin.display()
        ));
        msg
    }

    /// Starts the detached watchdog of the cluster (see [`WATCHDOG`]).
    fn spawn_watchdog(&mut self, owner: u32) -> Result<(), String> {
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(WATCHDOG)
            .arg("alk-pg-watchdog")
            .arg(owner.to_string())
            .arg(&self.dir)
            .arg(&self.data);
        if let RunAs::User { prefix, .. } = &self.run_as {
            cmd.args(prefix);
        }
        cmd.arg(self.bin.join("pg_ctl"))
            .current_dir("/")
            // Holding the caller's pipes open would keep whoever reads them
            // (cargo test's output capture, a parent waiting for the end of
            // output) waiting for the watchdog.
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // Its own process group: Ctrl-C in a terminal does not reach it.
            .process_group(0);
        let child = cmd
            .spawn()
            .map_err(|e| format!("cannot start the cluster's watchdog (sh): {e}"))?;
        self.watchdog = Some(child);
        Ok(())
    }

    /// `initdb` with the superuser and its password, then the settings.
    fn init(&self) -> Result<(), String> {
        let pwfile = self.dir.join("pwfile");
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&pwfile)
            .map_err(|e| format!("cannot write {}: {e}", pwfile.display()))?;
        writeln!(file, "{}", self.password)
            .map_err(|e| format!("cannot write {}: {e}", pwfile.display()))?;
        drop(file);
        self.run_as.chown(&pwfile)?;
        let mut cmd = self.tool("initdb");
        cmd.arg("-D")
            .arg(&self.data)
            .args(["-U", SUPERUSER, "-E", "UTF8", "--locale=C"])
            // Password authentication over TCP; the socket is in a
            // directory only the server's user can enter.
            .args(["--auth-host=scram-sha-256", "--auth-local=trust"])
            .arg(format!("--pwfile={}", pwfile.display()))
            .arg("--no-sync");
        let result = self.run("initdb", cmd);
        let _ = std::fs::remove_file(&pwfile);
        result?;
        let socket_dir = self.dir.display().to_string().replace('\'', "''");
        self.append_config(&format!(
            "\n# A throwaway cluster (alk-pg-cluster): fast, not durable.\n\
             listen_addresses = '127.0.0.1'\n\
             unix_socket_directories = '{socket_dir}'\n\
             fsync = off\n\
             full_page_writes = off\n\
             max_connections = 400\n"
        ))
    }

    /// Appends `text` to `postgresql.conf` (later settings win).
    fn append_config(&self, text: &str) -> Result<(), String> {
        let conf = self.data.join("postgresql.conf");
        OpenOptions::new()
            .append(true)
            .open(&conf)
            .and_then(|mut f| f.write_all(text.as_bytes()))
            .map_err(|e| format!("cannot write {}: {e}", conf.display()))
    }

    /// `pg_ctl start`, logging to the cluster's log file (so the server
    /// holds none of the caller's descriptors), then waits until the port
    /// accepts connections.
    fn pg_start(&self) -> Result<(), String> {
        let mut cmd = self.tool("pg_ctl");
        cmd.arg("start")
            .arg("-D")
            .arg(&self.data)
            .arg("-l")
            .arg(&self.log)
            .args(["-w", "-t", PG_CTL_WAIT_SECS]);
        self.run("pg_ctl start", cmd)?;
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, self.port));
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_err() {
            if Instant::now() > deadline {
                return Err(self.failure(
                    &format!("the server started but does not accept connections on {addr}"),
                    "",
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// Whether the server log, from byte `from` on, says the port was in use.
    fn port_was_taken(&self, from: u64) -> bool {
        std::fs::read(&self.log).is_ok_and(|log| {
            let new = log.get(from as usize..).unwrap_or_default();
            String::from_utf8_lossy(new).contains("Address already in use")
        })
    }
}

impl Drop for Cluster {
    /// Stops the server at once (`pg_ctl stop -m immediate`), removes the
    /// directory and ends the watchdog.
    fn drop(&mut self) {
        if self.data.join("postmaster.pid").exists() {
            let mut cmd = self.tool("pg_ctl");
            cmd.arg("stop")
                .arg("-D")
                .arg(&self.data)
                .args(["-m", "immediate", "-w", "-t", PG_CTL_WAIT_SECS])
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            let _ = cmd.status();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
        if let Some(mut watchdog) = self.watchdog.take() {
            let _ = watchdog.kill();
            let _ = watchdog.wait();
        }
    }
}

/// The URL of the PostgreSQL server tests use: the value of
/// `ALK_TEST_POSTGRES` when it is set (and not empty), else the URL of a
/// [`Cluster`] started on the first call and shared by the whole process
/// (its watchdog removes it once the process has ended).
///
/// # Panics
///
/// When no server can be started: tests that need one fail, they are never
/// skipped.
pub fn test_url() -> String {
    if let Some(url) = std::env::var(TEST_URL_VAR).ok().filter(|u| !u.is_empty()) {
        return url;
    }
    static SHARED: OnceLock<Result<Cluster, String>> = OnceLock::new();
    match SHARED.get_or_init(Cluster::start) {
        Ok(cluster) => cluster.url(),
        Err(e) => panic!(
            "cannot start a throwaway PostgreSQL server for the tests: {e}\n\
             (to use a running server instead, set {TEST_URL_VAR} to its URL)"
        ),
    }
}

/// The directory of the PostgreSQL server binaries (`initdb`, `pg_ctl`,
/// `postgres`, and usually `psql` and `pg_isready`): `ALK_PG_BIN` when set,
/// else the newest `/usr/lib/postgresql/<version>/bin`, else the directory
/// `pg_config --bindir` names, else the one of `initdb` on `PATH`.
pub fn bin_dir() -> Result<PathBuf, String> {
    find_bin_dir(
        std::env::var_os(BIN_VAR)
            .filter(|d| !d.is_empty())
            .map(PathBuf::from),
    )
}

/// [`bin_dir`], with `ALK_PG_BIN`'s value as `chosen`.
fn find_bin_dir(chosen: Option<PathBuf>) -> Result<PathBuf, String> {
    if let Some(dir) = chosen {
        return if has_server_tools(&dir) {
            Ok(dir)
        } else {
            Err(format!(
                "{BIN_VAR}={} has no PostgreSQL server binaries (initdb, pg_ctl)",
                dir.display()
            ))
        };
    }
    let debian = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = version_key(entry.file_name().to_str()?)?;
            Some((version, entry.path().join("bin")))
        })
        .filter(|(_, bin)| has_server_tools(bin))
        .max_by(|a, b| a.0.cmp(&b.0));
    if let Some((_, bin)) = debian {
        return Ok(bin);
    }
    if let Ok(out) = Command::new("pg_config")
        .arg("--bindir")
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        && out.status.success()
    {
        let bin = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if has_server_tools(&bin) {
            return Ok(bin);
        }
    }
    if let Some(initdb) = find_program("initdb") {
        // A link (say /usr/local/bin/initdb) points into the real directory.
        let real = initdb.canonicalize().unwrap_or(initdb);
        if let Some(bin) = real.parent()
            && has_server_tools(bin)
        {
            return Ok(bin.to_path_buf());
        }
    }
    Err(NO_BINARIES.into())
}

fn has_server_tools(dir: &Path) -> bool {
    SERVER_TOOLS.iter().all(|tool| dir.join(tool).is_file())
}

/// `"15"` → `[15]`, `"9.6"` → `[9, 6]`; `None` for other names.
fn version_key(name: &str) -> Option<Vec<u32>> {
    name.split('.').map(|part| part.parse().ok()).collect()
}

/// `name` on `PATH`, or in the system directories (`PATH` may lack the
/// `sbin` ones).
fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// Whom `initdb` and `pg_ctl` run as.
#[derive(Debug)]
enum RunAs {
    /// The current user (not root).
    Me,
    /// Another user, because the current one is root.
    User {
        uid: u32,
        gid: u32,
        /// The command (and its arguments) that runs the rest of a command
        /// line as the user.
        prefix: Vec<String>,
    },
}

impl RunAs {
    /// [`RunAs::Me`] unless this process is root; then the `postgres` user,
    /// or `nobody`.
    fn detect() -> Result<RunAs, String> {
        let root = std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0);
        if !root {
            return Ok(RunAs::Me);
        }
        let passwd = std::fs::read_to_string("/etc/passwd")
            .map_err(|e| format!("cannot read /etc/passwd: {e}"))?;
        let (name, uid, gid) = ["postgres", "nobody"]
            .into_iter()
            .find_map(|name| {
                let (uid, gid) = passwd_ids(&passwd, name)?;
                Some((name, uid, gid))
            })
            .ok_or(
                "running as root, which the PostgreSQL server refuses, and there is neither a \
                 `postgres` nor a `nobody` user to run it as",
            )?;
        let prefix = if let Some(runuser) = find_program("runuser") {
            vec![
                runuser.display().to_string(),
                "-u".into(),
                name.into(),
                "--".into(),
            ]
        } else if let Some(setpriv) = find_program("setpriv") {
            vec![
                setpriv.display().to_string(),
                format!("--reuid={uid}"),
                format!("--regid={gid}"),
                "--clear-groups".into(),
                "--".into(),
            ]
        } else {
            return Err(format!(
                "running as root, which the PostgreSQL server refuses, and neither `runuser` nor \
                 `setpriv` (util-linux) is there to run it as `{name}`"
            ));
        };
        Ok(RunAs::User { uid, gid, prefix })
    }

    /// A command running `program` as the user.
    fn command(&self, program: &Path) -> Command {
        match self {
            RunAs::Me => Command::new(program),
            RunAs::User { prefix, .. } => {
                let mut cmd = Command::new(&prefix[0]);
                cmd.args(&prefix[1..]).arg(program);
                cmd
            }
        }
    }

    /// Gives `path` to the user.
    fn chown(&self, path: &Path) -> Result<(), String> {
        match self {
            RunAs::Me => Ok(()),
            RunAs::User { uid, gid, .. } => std::os::unix::fs::chown(path, Some(*uid), Some(*gid))
                .map_err(|e| format!("cannot give {} to uid {uid}: {e}", path.display())),
        }
    }
}

/// The uid and gid of user `name` in the text of `/etc/passwd`.
fn passwd_ids(passwd: &str, name: &str) -> Option<(u32, u32)> {
    passwd.lines().find_map(|line| {
        let mut fields = line.split(':');
        if fields.next()? != name {
            return None;
        }
        let _password = fields.next()?;
        Some((fields.next()?.parse().ok()?, fields.next()?.parse().ok()?))
    })
}

/// A new directory only its owner can enter, under the system's temporary
/// directory.
fn temp_dir() -> Result<PathBuf, String> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let base = std::env::temp_dir();
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    for _ in 0..100 {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let dir = base.join(format!("alk-pg-{}-{n}-{nanos:09}", std::process::id()));
        match DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(format!("cannot create {}: {e}", dir.display())),
        }
    }
    Err(format!(
        "cannot create a new directory in {}",
        base.display()
    ))
}

/// A password nobody can guess: [`PASSWORD_PREFIX`] and 32 hex digits
/// (from the randomly keyed std hasher, the time and the process id).
fn new_password() -> String {
    let mut password = PASSWORD_PREFIX.to_string();
    for _ in 0..2 {
        let mut hasher = RandomState::new().build_hasher();
        hasher.write_u128(
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
        );
        hasher.write_u32(std::process::id());
        password.push_str(&format!("{:016x}", hasher.finish()));
    }
    password
}

/// A TCP port of 127.0.0.1 that was free a moment ago.
fn free_port() -> Result<u16, String> {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("cannot find a free port on 127.0.0.1: {e}"))
}

/// The last [`TAIL_LINES`] lines of `text`.
fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.trim_end().lines().collect();
    lines[lines.len().saturating_sub(TAIL_LINES)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `select 1` through `psql` over TCP: its output, or its error.
    fn select_one(bin: &Path, port: u16, password: &str) -> Result<String, String> {
        let out = Command::new(bin.join("psql"))
            .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-U", SUPERUSER])
            .args(["-d", "postgres", "-w", "-X", "-At", "-c", "select 1"])
            .env("PGPASSWORD", password)
            .env("PGCONNECT_TIMEOUT", "5")
            .stdin(Stdio::null())
            .output()
            .map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    fn accepts(port: u16) -> bool {
        TcpStream::connect((Ipv4Addr::LOCALHOST, port)).is_ok()
    }

    /// Waits up to `secs` seconds for `done`.
    fn eventually(secs: u64, done: impl Fn() -> bool) -> bool {
        let deadline = Instant::now() + Duration::from_secs(secs);
        while !done() {
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        true
    }

    #[test]
    fn start_stop_restart_drop() {
        let cluster = Cluster::start().unwrap();
        let (port, bin, dir) = (cluster.port(), cluster.bin.clone(), cluster.dir.clone());
        let url = cluster.url();
        assert!(cluster.password().starts_with(PASSWORD_PREFIX));
        assert_eq!(
            url,
            format!(
                "postgres://alk:{}@127.0.0.1:{port}/postgres",
                cluster.password()
            )
        );
        assert_eq!(select_one(&bin, port, cluster.password()).unwrap(), "1");
        let wrong = select_one(&bin, port, "not-the-password").unwrap_err();
        assert!(wrong.contains("password authentication failed"), "{wrong}");

        cluster.stop().unwrap();
        assert!(!accepts(port));
        assert!(select_one(&bin, port, cluster.password()).is_err());

        cluster.restart().unwrap();
        assert_eq!(cluster.port(), port);
        assert_eq!(select_one(&bin, port, cluster.password()).unwrap(), "1");

        drop(cluster);
        assert!(!dir.exists());
        assert!(!accepts(port));
    }

    #[test]
    fn watchdog_cleans_up_after_the_owner() {
        let mut owner = Command::new("sleep").arg("60").spawn().unwrap();
        let cluster = Cluster::start_for(owner.id()).unwrap();
        let (port, dir) = (cluster.port(), cluster.dir.clone());
        assert_eq!(
            select_one(&cluster.bin, port, cluster.password()).unwrap(),
            "1"
        );
        owner.kill().unwrap();
        owner.wait().unwrap();
        assert!(
            eventually(5, || !dir.exists() && !accepts(port)),
            "the watchdog did not clean up {}",
            dir.display()
        );
    }

    #[test]
    fn test_url_connects() {
        let url = test_url();
        assert!(url.starts_with("postgres"), "{url}");
        let out = Command::new(bin_dir().unwrap().join("psql"))
            .arg(&url)
            .args(["-w", "-X", "-At", "-c", "select 1"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "1");
        assert_eq!(test_url(), url);
    }

    #[test]
    fn a_chosen_directory_without_binaries_is_an_error() {
        let e = find_bin_dir(Some(PathBuf::from("/nonexistent"))).unwrap_err();
        assert!(e.contains("ALK_PG_BIN=/nonexistent"), "{e}");
    }

    #[test]
    fn passwd_and_versions() {
        let passwd =
            "root:x:0:0:root:/root:/bin/bash\npostgres:x:101:104::/var/lib/postgresql:/bin/bash\n";
        assert_eq!(passwd_ids(passwd, "postgres"), Some((101, 104)));
        assert_eq!(passwd_ids(passwd, "nobody"), None);
        assert!(version_key("9.6") < version_key("15"));
        assert_eq!(version_key("main"), None);
    }
}
