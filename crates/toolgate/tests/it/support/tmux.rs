//! A tmux server of a test's own, to drive a terminal program (`toolgate
//! approve`) as a person would: keys in, the screen read back.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test support

use std::process::Command;
use std::time::Instant;

use super::PATIENCE;

/// A tmux server of our own with one 200×50 window running `command`.
pub struct Tmux {
    server: String,
}

impl Tmux {
    /// `None` (after saying why) when tmux is missing.
    pub fn start(name: &str, command: &str) -> Option<Tmux> {
        if Command::new("tmux").arg("-V").output().is_err() {
            eprintln!("skipped: tmux is not installed");
            return None;
        }
        let server = format!("toolgate-test-{}-{name}", std::process::id());
        let status = Command::new("tmux")
            .args([
                "-L",
                &server,
                "-f",
                "/dev/null",
                "new-session",
                "-d",
                "-x",
                "200",
                "-y",
                "50",
            ])
            .arg(command)
            .env_remove("TMUX")
            .status()
            .expect("run tmux");
        assert!(status.success(), "tmux new-session failed");
        Some(Tmux { server })
    }

    pub fn tmux(&self, args: &[&str]) -> String {
        let output = Command::new("tmux")
            .args(["-L", &self.server])
            .args(args)
            .output()
            .expect("run tmux");
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// Type keys (tmux key names: `Enter`, `Left`, `j`).
    pub fn keys(&self, keys: &[&str]) {
        for key in keys {
            self.tmux(&["send-keys", "-t", "0", key]);
        }
    }

    /// Type text literally.
    pub fn text(&self, text: &str) {
        self.tmux(&["send-keys", "-t", "0", "-l", text]);
    }

    pub fn screen(&self) -> String {
        self.tmux(&["capture-pane", "-p", "-t", "0"])
    }

    /// Wait until the pane shows `what`; the screen then.
    pub fn wait_for(&self, what: &str) -> String {
        let start = Instant::now();
        loop {
            let screen = self.screen();
            if screen.contains(what) {
                return screen;
            }
            if start.elapsed() > PATIENCE {
                panic!("the pane never showed {what:?}; it shows:\n{screen}");
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
}

impl Tmux {
    /// Wait until the pane no longer shows `what`.
    pub fn wait_gone(&self, what: &str) {
        let start = Instant::now();
        while self.screen().contains(what) {
            if start.elapsed() > PATIENCE {
                panic!("the pane still shows {what:?}:\n{}", self.screen());
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        self.tmux(&["kill-server"]);
    }
}
