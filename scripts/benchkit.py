"""The benchmark kit the speed scripts share (bench, bench-replay, latency,
hook-latency): the floor program and the corpus generator.

By default both are the repository's own, built from
crates/toolgate/examples/floor.rs and corpus.rs, so the benchmarks run on a
fresh clone with only the Rust toolchain. With SHARED=DIR set (a folder
holding bench/floor and bench/gen_corpus.py), that kit is used instead, for
figures comparable with ones measured against it (the history in
docs/contributing/benchmarks.md before 2026-11-29 was).
"""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.environ.get("SHARED")


def describe():
    """One line naming the kit in use, for a script's report."""
    if SHARED:
        return f"kit: {os.path.join(SHARED, 'bench')} (floor/, gen_corpus.py)"
    return "kit: crates/toolgate/examples/floor.rs and corpus.rs"


def _examples():
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "toolgate", "--example", "floor",
                    "--example", "corpus"], cwd=ROOT, check=True)
    return os.path.join(ROOT, "target", "release", "examples")


def floor(work):
    """The floor program's path (built into WORK for the shared kit)."""
    if SHARED:
        target = os.path.join(work, "floor-target")
        subprocess.run(["cargo", "build", "--release", "-q"], cwd=os.path.join(SHARED, "bench", "floor"),
                       env={**os.environ, "CARGO_TARGET_DIR": target}, check=True)
        return os.path.join(target, "release", "floor")
    return os.path.join(_examples(), "floor")


def corpus(calls, seed, out):
    """Write the corpus of CALLS calls for SEED to the open binary file OUT."""
    if SHARED:
        command = [sys.executable, os.path.join(SHARED, "bench", "gen_corpus.py"), str(calls), str(seed)]
    else:
        command = [os.path.join(_examples(), "corpus"), str(calls), str(seed)]
    subprocess.run(command, stdout=out, check=True)


def corpus_bytes(calls, seed):
    """The corpus of CALLS calls for SEED, as bytes."""
    import tempfile
    with tempfile.TemporaryFile() as out:
        corpus(calls, seed, out)
        out.seek(0)
        return out.read()
