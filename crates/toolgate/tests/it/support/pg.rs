//! A PostgreSQL cluster for the fleet tests: one per test process, started
//! on first use, each test in a database of its own (so tests run in
//! parallel).
//!
//! The cluster lives in a temporary directory, listens on a free loopback
//! port (its unix socket in that directory) with `trust` authentication,
//! and runs with fsync off (a commit still reaches the operating system
//! before it is reported, so `pg_ctl stop -m immediate` loses nothing
//! committed; only a crash of the machine would). initdb refuses root: as root the cluster runs
//! as `postgres` if that user exists, else as `toolgate-test` (made with
//! useradd when missing), and the directory is given to that user. It stops
//! (`pg_ctl stop -m immediate`) and its directory goes when the [`Cluster`]
//! is dropped or, for the process's shared one (a static is never dropped),
//! when the test process ends however it ends: a watchdog process waits for
//! the end of a pipe only this process holds open.
//!
//! Where the server's binaries are missing (PG_BIN, default
//! /usr/lib/postgresql/15/bin), [`database`] says "skipped: PostgreSQL
//! server not found (…)" and the test passes, unless TOOLGATE_REQUIRE_PG
//! is set (CI sets it), when it fails.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test support

use std::io::Write as _;
use std::os::unix::process::CommandExt as _;
use std::panic::Location;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};

/// Where Debian's postgresql-15 puts the server's binaries.
pub const DEFAULT_PG_BIN: &str = "/usr/lib/postgresql/15/bin";

/// A running cluster.
pub struct Cluster {
    dir: PathBuf,
    port: u16,
    bin: PathBuf,
    run_as: Option<String>,
    watchdog: Mutex<Option<Child>>,
}

/// The server's binaries, or why there are none.
fn pg_bin() -> Result<PathBuf, String> {
    let bin = std::env::var_os("PG_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_PG_BIN));
    for program in ["initdb", "pg_ctl", "postgres"] {
        if !bin.join(program).is_file() {
            return Err(format!("{} is missing", bin.join(program).display()));
        }
    }
    Ok(bin)
}

/// The user the cluster runs as when this process is root.
fn cluster_user() -> Option<String> {
    if !rustix::process::geteuid().is_root() {
        return None;
    }
    let exists = |user: &str| {
        Command::new("id")
            .arg(user)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
    };
    if exists("postgres") {
        return Some("postgres".to_string());
    }
    if !exists("toolgate-test") {
        let _ = Command::new("useradd")
            .args(["--system", "--no-create-home", "toolgate-test"])
            .status();
    }
    Some("toolgate-test".to_string())
}

/// A free loopback port (free when asked: the server may lose a race for it).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .unwrap()
}

impl Cluster {
    /// A command for the server's program `program`, as the cluster's user,
    /// in the cluster's directory.
    fn pg(&self, program: &str) -> Command {
        let path = self.bin.join(program);
        let mut command = match &self.run_as {
            Some(user) => {
                let mut command = Command::new("setpriv");
                command
                    .args(["--reuid", user, "--regid", user, "--init-groups"])
                    .arg(path);
                command
            }
            None => Command::new(path),
        };
        command.current_dir(&self.dir);
        command
    }

    /// initdb a new cluster in a new temporary directory and start it.
    pub fn start() -> Result<Cluster, String> {
        Cluster::start_with(|_| Ok(()))
    }

    /// A cluster that speaks TLS too (`ssl = on`), with the certificate
    /// chain `cert` and its key `key` (PEM).
    pub fn start_with_tls(cert: &str, key: &str) -> Result<Cluster, String> {
        Cluster::start_with(|data| {
            use std::os::unix::fs::PermissionsExt as _;
            let put = |name: &str, text: &str| -> Result<(), String> {
                let path = data.join(name);
                std::fs::write(&path, text).map_err(|err| err.to_string())?;
                // The server refuses a key others may read.
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
                    .map_err(|err| err.to_string())
            };
            put("server.crt", cert)?;
            put("server.key", key)?;
            let mut conf = std::fs::OpenOptions::new()
                .append(true)
                .open(data.join("postgresql.conf"))
                .map_err(|err| err.to_string())?;
            writeln!(
                conf,
                "ssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'"
            )
            .map_err(|err| err.to_string())
        })
    }

    /// initdb a new cluster, let `setup` change its data directory, and
    /// start it.
    fn start_with(setup: impl FnOnce(&Path) -> Result<(), String>) -> Result<Cluster, String> {
        let bin = pg_bin()?;
        let run_as = cluster_user();
        static COUNT: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "toolgate-pg-{}-{}",
            std::process::id(),
            COUNT.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut cluster = Cluster {
            dir,
            port: 0,
            bin,
            run_as,
            watchdog: Mutex::new(None),
        };
        // The watchdog first, so that whatever happens next is cleaned up.
        let stop = cluster.stop_command();
        let mut argv = vec![stop.get_program().to_owned()];
        argv.extend(stop.get_args().map(|arg| arg.to_owned()));
        let watchdog = Command::new("sh")
            .arg("-c")
            .arg(r#"cat >/dev/null; "$@" >/dev/null 2>&1; rm -rf -- "$CLUSTER_DIR""#)
            .arg("sh")
            .args(argv)
            .env("CLUSTER_DIR", &cluster.dir)
            .current_dir(&cluster.dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // Not in the test's process group: a Ctrl-C stops the tests,
            // and the watchdog then stops the cluster.
            .process_group(0)
            .spawn()
            .map_err(|err| format!("cannot start the watchdog: {err}"))?;
        *cluster.watchdog.lock().unwrap() = Some(watchdog);
        if let Some(user) = &cluster.run_as {
            let status = Command::new("chown")
                .arg(format!("{user}:"))
                .arg(&cluster.dir)
                .status()
                .map_err(|err| err.to_string())?;
            if !status.success() {
                return Err(format!("cannot give {} to {user}", cluster.dir.display()));
            }
        }
        let data = cluster.dir.join("data");
        let out = cluster
            .pg("initdb")
            .arg("-D")
            .arg(&data)
            .args([
                "-U",
                "postgres",
                "-A",
                "trust",
                "--no-sync",
                "-E",
                "UTF8",
                "--locale=C",
            ])
            .output()
            .map_err(|err| format!("cannot run initdb: {err}"))?;
        if !out.status.success() {
            return Err(format!(
                "initdb failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        setup(&data)?;
        if let Some(user) = &cluster.run_as {
            // What `setup` wrote is the cluster user's (a key file must be).
            let status = Command::new("chown")
                .arg("-R")
                .arg(format!("{user}:"))
                .arg(&data)
                .status()
                .map_err(|err| err.to_string())?;
            if !status.success() {
                return Err(format!("cannot give {} to {user}", data.display()));
            }
        }
        let mut last = String::new();
        for _ in 0..5 {
            cluster.port = free_port();
            match cluster.start_again() {
                Ok(()) => return Ok(cluster),
                Err(err) => last = err,
            }
        }
        Err(last)
    }

    fn stop_command(&self) -> Command {
        let mut command = self.pg("pg_ctl");
        command
            .arg("-D")
            .arg(self.dir.join("data"))
            .args(["stop", "-m", "immediate"]);
        command
    }

    /// Start the cluster (again) on its port.
    pub fn start_again(&self) -> Result<(), String> {
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off \
             -c full_page_writes=off -c max_connections=300 -c dynamic_shared_memory_type=mmap",
            self.port,
            self.dir.display()
        );
        let out = self
            .pg("pg_ctl")
            .arg("-D")
            .arg(self.dir.join("data"))
            .arg("-l")
            .arg(self.dir.join("server.log"))
            .args(["-w", "-t", "60", "-o", &options, "start"])
            .output()
            .map_err(|err| format!("cannot run pg_ctl: {err}"))?;
        if out.status.success() {
            return Ok(());
        }
        Err(format!(
            "pg_ctl start failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
        ))
    }

    /// Stop the cluster at once (`pg_ctl stop -m immediate`), as a crash would.
    pub fn stop(&self) {
        let _ = self.stop_command().output();
    }

    /// The URL of `database`.
    pub fn url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    /// Run `sql` in `database` with psql; its output (unaligned, tuples
    /// only). Panics when psql fails.
    pub fn psql(&self, database: &str, sql: &str) -> String {
        let psql = self.bin.join("psql");
        let psql = if psql.is_file() {
            psql
        } else {
            PathBuf::from("psql")
        };
        let out = Command::new(psql)
            .args([
                "-X",
                "-q",
                "-t",
                "-A",
                "-v",
                "ON_ERROR_STOP=1",
                "-h",
                "127.0.0.1",
            ])
            .args([
                "-p",
                &self.port.to_string(),
                "-U",
                "postgres",
                "-d",
                database,
            ])
            .args(["-c", sql])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "psql {sql}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if let Some(mut watchdog) = self.watchdog.lock().unwrap().take() {
            // Its end of input: it stops the cluster and removes the directory.
            drop(watchdog.stdin.take());
            let _ = watchdog.wait();
        }
    }
}

/// The cluster of this test process, or why there is none.
fn shared() -> &'static Result<Cluster, String> {
    static SHARED: OnceLock<Result<Cluster, String>> = OnceLock::new();
    SHARED.get_or_init(|| match pg_bin() {
        Err(missing) => Err(format!("PostgreSQL server not found ({missing})")),
        Ok(_) => Cluster::start().map_err(|err| format!("PostgreSQL did not start: {err}")),
    })
}

/// The process's cluster, or `None` after saying "skipped: …" when the
/// server's binaries are missing and TOOLGATE_REQUIRE_PG is unset. Any other
/// failure to start it fails the test.
pub fn cluster() -> Option<&'static Cluster> {
    match shared() {
        Ok(cluster) => Some(cluster),
        Err(why) if why.starts_with("PostgreSQL server not found") => {
            if std::env::var_os("TOOLGATE_REQUIRE_PG").is_some() {
                panic!("{why}, and TOOLGATE_REQUIRE_PG is set");
            }
            let _ = writeln!(std::io::stderr(), "skipped: {why}");
            None
        }
        Err(why) => panic!("{why}"),
    }
}

/// A new, empty database on the process's cluster for one test, and the
/// cluster; `None` where [`cluster`] skips. The name is the calling file's
/// (`fleet_store` for `fleet_store.rs`) and `name`.
#[track_caller]
pub fn database(name: &str) -> Option<(String, &'static Cluster)> {
    let area = Path::new(Location::caller().file())
        .file_stem()
        .and_then(|stem| stem.to_str())
        .unwrap_or("unknown")
        .to_string();
    let cluster = cluster()?;
    let database: String = format!("{area}_{name}")
        .chars()
        .map(|ch| {
            if ch.is_ascii_alphanumeric() {
                ch.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    cluster.psql("postgres", &format!("DROP DATABASE IF EXISTS {database}"));
    cluster.psql("postgres", &format!("CREATE DATABASE {database}"));
    Some((database, cluster))
}
