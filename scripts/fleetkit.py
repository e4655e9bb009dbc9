"""What bench-fleet and soak-fleet share: a throwaway PostgreSQL store
(scripts/pg-cluster), brokers of the fleet (`toolgate serve --listen unix:…
--store URL`) run from the real release binary, and connections to their
sockets speaking the JSON-lines protocol (docs/protocol.md).

Python 3 standard library only.
"""
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PG_CLUSTER = os.path.join(ROOT, "scripts", "pg-cluster")
PG_BIN = os.environ.get("PG_BIN", "/usr/lib/postgresql/15/bin")


def binary():
    """BIN, else target/release/toolgate (built with `cargo build --release -p toolgate` when missing)."""
    path = os.environ.get("BIN")
    if path:
        return os.path.abspath(path)  # (brokers run in the project directory)
    path = os.path.join(ROOT, "target", "release", "toolgate")
    if not os.path.exists(path):
        subprocess.run(["cargo", "build", "--release", "-q", "-p", "toolgate"], cwd=ROOT, check=True)
    return path


def percentile(values, fraction):
    """The value below which FRACTION of VALUES lie (nearest rank)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, int(round(fraction * len(ordered) + 0.5)) - 1))
    return ordered[index]


class Cluster:
    """A PostgreSQL 15 cluster of scripts/pg-cluster in a directory of its own."""

    def __init__(self):
        # Its own directory under /tmp: as root, pg-cluster gives it to the
        # server's user, who must be able to reach it.
        self.dir = tempfile.mkdtemp(prefix="tgf-pg-")
        os.chmod(self.dir, 0o755)
        self.url = self._run("start", self.dir)
        with open(os.path.join(self.dir, "port")) as f:
            self.port = f.read().strip()
        self.running = True

    def _run(self, *args):
        done = subprocess.run([PG_CLUSTER, *args], capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"pg-cluster {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout.strip()

    def stop(self):
        """`pg_ctl stop -m immediate`, as a crash would."""
        if self.running:
            self._run("stop", self.dir)
            self.running = False

    def start(self):
        """Start it again on the same directory and port."""
        if not self.running:
            self._run("start", self.dir, self.port)
            self.running = True

    def psql(self, query):
        """QUERY's rows, `|`-separated, one a line."""
        program = os.path.join(PG_BIN, "psql")
        if not os.path.exists(program):
            program = "psql"
        done = subprocess.run([program, "-X", "-q", "-tA", "-h", "127.0.0.1", "-p", self.port, "-U",
                               "postgres", "-d", "toolgate", "-c", query], capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"psql {query!r}: {done.stderr.strip()}")
        return done.stdout.strip()

    def remove(self):
        try:
            self.stop()
        except RuntimeError:
            pass
        shutil.rmtree(self.dir, ignore_errors=True)


class Broker:
    """`toolgate serve --mode ask --listen unix:DIR/b.sock [--store URL]`, waited for."""

    def __init__(self, name, work, project, url=None, lease_ms=None, extra=()):
        self.name = name
        self.dir = os.path.join(work, name)
        os.makedirs(self.dir, exist_ok=True)
        os.chmod(self.dir, 0o700)
        self.socket = os.path.join(self.dir, "b.sock")
        self.project = project
        self.url = url
        self.lease_ms = lease_ms
        self.extra = list(extra)
        self.process = None
        self.starts = 0
        self.start()

    def start(self, patience=30.0):
        env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLGATE_")}
        if self.lease_ms:
            env["TOOLGATE_LEASE_MS"] = str(self.lease_ms)
        command = [binary(), "serve", "--mode", "ask", "--listen", f"unix:{self.socket}",
                   "--project-root", self.project, *self.extra]
        if self.url:
            command += ["--store", self.url]
        self.starts += 1
        stderr = open(os.path.join(self.dir, "stderr"), "a")
        stderr.write(f"--- start {self.starts} at {time.time():.3f}\n")
        stderr.flush()
        self.process = subprocess.Popen(command, cwd=self.project, env=env, stdin=subprocess.DEVNULL,
                                        stdout=subprocess.DEVNULL, stderr=stderr)
        stderr.close()
        began = time.monotonic()
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"broker {self.name} exited with {self.process.returncode}: {self.stderr()[-2000:]}")
            try:
                probe = socket.socket(socket.AF_UNIX)
                probe.connect(self.socket)
                probe.close()
                return
            except OSError:
                probe.close()
            if time.monotonic() - began > patience:
                raise RuntimeError(f"broker {self.name} did not start: {self.stderr()[-2000:]}")
            time.sleep(0.02)

    def alive(self):
        return self.process is not None and self.process.poll() is None

    def stderr(self):
        try:
            with open(os.path.join(self.dir, "stderr"), errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def kill(self):
        """SIGKILL, as a crash would."""
        if self.alive():
            self.process.send_signal(signal.SIGKILL)
        if self.process is not None:
            self.process.wait()

    def stop(self, patience=30.0):
        """SIGTERM, and its exit status."""
        if not self.alive():
            return self.process.returncode if self.process else None
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=patience)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            return "killed after SIGTERM timed out"


class Gone(Exception):
    """The broker closed the connection."""


class Conn:
    """One connection to a broker's socket, read by one thread only.

    Every decision read is counted by its callID (`decisions`), and every
    tool_call sent is remembered (`sent`), so a call without exactly one
    decision can be found."""

    def __init__(self, broker, role, client):
        self.broker = broker.name
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect(broker.socket)
        self.buffer = b""
        self.frames = []  # read but not yet taken
        self.sent = {}  # callID -> send time
        self.decisions = {}  # callID -> [decision frames]
        self.closed = False
        self.role = role
        ready = self.recv(30)
        if not ready or ready.get("type") != "ready":
            raise RuntimeError(f"no ready from {broker.name}: {ready}")
        self.send({"type": "hello", "role": role, "client": client})
        ready = self.recv(30)
        if not ready or ready.get("type") != "ready":
            raise RuntimeError(f"hello not answered by {broker.name}: {ready}")

    def send(self, frame):
        if frame.get("type") == "tool_call":
            self.sent[frame["callID"]] = time.monotonic()
        try:
            self.sock.sendall((json.dumps(frame) + "\n").encode())
        except OSError:
            self.closed = True
            raise Gone(self.broker)

    def _fill(self, timeout):
        """Read what is there within TIMEOUT; False on timeout."""
        if self.closed:
            raise Gone(self.broker)
        ready, _, _ = select.select([self.sock], [], [], max(0.0, timeout))
        if not ready:
            return False
        try:
            chunk = self.sock.recv(1 << 16)
        except OSError:
            chunk = b""
        if not chunk:
            self.closed = True
            raise Gone(self.broker)
        self.buffer += chunk
        *lines, self.buffer = self.buffer.split(b"\n")
        for line in lines:
            if line.strip():
                frame = json.loads(line)
                if frame.get("type") == "decision":
                    self.decisions.setdefault(frame.get("callID"), []).append(frame)
                self.frames.append(frame)
        return True

    def recv(self, timeout):
        """The next frame within TIMEOUT seconds, or None."""
        deadline = time.monotonic() + timeout
        while not self.frames:
            if not self._fill(deadline - time.monotonic()) and time.monotonic() >= deadline:
                return None
        return self.frames.pop(0)

    def wait(self, wanted, timeout, what="a frame"):
        """Frames until one WANTED accepts (the others dropped): that one."""
        deadline = time.monotonic() + timeout
        while True:
            frame = self.recv(max(0.0, deadline - time.monotonic()))
            if frame is None:
                raise TimeoutError(f"no {what} from {self.broker} within {timeout} s")
            if wanted(frame):
                return frame

    def drain(self, timeout=0.2):
        """Everything that arrives within TIMEOUT (the connection may be gone)."""
        frames = []
        try:
            while True:
                frame = self.recv(timeout)
                if frame is None:
                    return frames
                frames.append(frame)
        except Gone:
            return frames

    def close(self):
        self.closed = True
        try:
            self.sock.close()
        except OSError:
            pass


def tool_call(session, call, command):
    """A bash call: ask mode asks about `touch`, `git commit`; allows `git status`."""
    return {"type": "tool_call", "sessionID": session, "callID": call, "tool": "bash",
            "input": {"command": command}}


def answer(request, response, **extra):
    return {"type": "permission_response", "permissionID": request["permissionID"], "response": response,
            **extra}
