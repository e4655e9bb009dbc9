//! `toolgate serve --listen` out of file descriptors: while `accept` fails
//! (EMFILE) the broker backs off instead of retrying in a tight loop, says
//! so on stderr once in a while rather than for every failure, and serves
//! new connections again once descriptors are free.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic

use std::io::{BufRead, BufReader, ErrorKind};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support;

/// `toolgate serve --listen` under `ulimit -n LIMIT`, its stderr in a file;
/// killed on drop.
struct Starved {
    child: Child,
    dir: PathBuf,
    socket: PathBuf,
    stderr: PathBuf,
}

impl Starved {
    fn start(name: &str, limit: u32) -> Starved {
        let dir = std::env::temp_dir().join(format!(
            "toolgate-descriptors-{}-{name}-{limit}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        let socket = dir.join("run/broker.sock");
        let stderr = dir.join("stderr");
        let child = Command::new("sh")
            .args(["-c", r#"ulimit -n "$1" && shift && exec "$@""#, "sh"])
            .arg(limit.to_string())
            .arg(env!("CARGO_BIN_EXE_toolgate"))
            .args(["serve", "--listen"])
            .arg(format!("unix:{}", socket.display()))
            .arg("--project-root")
            .arg(&dir)
            .current_dir(&dir)
            .env_remove("RUST_LOG")
            .env_remove("TOOLGATE_MODE")
            .env_remove("TOOLGATE_PERMISSION")
            .env_remove("TOOLGATE_STATE_DIR")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .unwrap();
        let started = Instant::now();
        while UnixStream::connect(&socket).is_err() {
            assert!(started.elapsed() < support::PATIENCE, "no broker");
            std::thread::sleep(Duration::from_millis(20));
        }
        Starved {
            child,
            dir,
            socket,
            stderr,
        }
    }

    /// Open connections until one is not served: `Some` of them all (the
    /// last one waiting, unaccepted) once `accept` fails; `None` when the
    /// descriptors left were too few for a connection but enough for
    /// `accept` (the broker then closes each new connection at once, and
    /// `accept` never fails).
    fn exhaust(&self) -> Option<Vec<UnixStream>> {
        let mut open = Vec::new();
        for _ in 0..1000 {
            let stream = UnixStream::connect(&self.socket).unwrap();
            stream
                .set_read_timeout(Some(Duration::from_secs(2)))
                .unwrap();
            let mut line = String::new();
            match BufReader::new(&stream).read_line(&mut line) {
                Ok(0) => return None,
                Ok(_) => assert!(line.contains(r#""type":"ready""#), "{line}"),
                Err(err) if matches!(err.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    open.push(stream);
                    return Some(open);
                }
                Err(err) => panic!("{err}"),
            }
            open.push(stream);
        }
        panic!("1000 connections and the broker still accepts");
    }

    /// Lines of stderr so far.
    fn stderr_lines(&self) -> usize {
        std::fs::read(&self.stderr)
            .unwrap()
            .iter()
            .filter(|&&byte| byte == b'\n')
            .count()
    }

    /// User and system CPU time so far, in clock ticks.
    fn cpu_ticks(&self) -> u64 {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap();
        // After "PID (COMM) ": state is field 0, utime 11, stime 12.
        let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
        fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
    }
}

impl Drop for Starved {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A new connection is greeted with `ready`.
fn served(socket: &Path) -> bool {
    let stream = UnixStream::connect(socket).unwrap();
    stream.set_read_timeout(Some(support::PATIENCE)).unwrap();
    let mut line = String::new();
    BufReader::new(&stream).read_line(&mut line).is_ok() && line.contains(r#""type":"ready""#)
}

#[test]
fn a_broker_out_of_descriptors_backs_off_and_recovers() {
    // Each connection takes three descriptors: one of three limits leaves
    // none at all once the broker is full.
    let (broker, open) = (40..43)
        .find_map(|limit| {
            let broker = Starved::start("emfile", limit);
            let open = broker.exhaust()?;
            Some((broker, open))
        })
        .expect("no limit made accept fail");
    // Failing accepts meanwhile: a few lines of stderr at most, and little
    // CPU (a tight loop takes the whole second).
    std::thread::sleep(Duration::from_millis(300));
    let (lines, ticks, since) = (broker.stderr_lines(), broker.cpu_ticks(), Instant::now());
    std::thread::sleep(Duration::from_secs(1));
    let lines = broker.stderr_lines() - lines;
    let ticks = broker.cpu_ticks() - ticks;
    let elapsed = since.elapsed();
    let stderr = std::fs::read_to_string(&broker.stderr).unwrap();
    let head: String = stderr.lines().take(5).collect::<Vec<_>>().join("\n");
    assert!(lines <= 3, "{lines} lines in {elapsed:?}:\n{head}");
    assert!(ticks <= 15, "{ticks} ticks of CPU in {elapsed:?}");
    assert!(
        stderr.contains("Too many open files"),
        "the failure is not reported:\n{head}"
    );
    // Descriptors free again: served as before.
    drop(open);
    assert!(
        served(&broker.socket),
        "not served after descriptors were freed"
    );
}
