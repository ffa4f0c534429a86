"""Issue 45 item 6: a 400 MB trainer log made the watcher use 1.67 GB (each log read whole, then split whole).

The announcements are read a block of lines at a time now; these tests run the reading in a child process on a
generated log of tens of MB and compare the child's peak memory growth with the log's size (a ratio, no timing):
reading the log whole costs at least its size, splitting it about three times more."""

from __future__ import annotations

import gzip
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# The child prints the names found and how much its peak RSS grew (bytes) while reading them.
CHILD = r"""
import sys
from pathlib import Path
from engine.checkpoints.partial_saves import read_announced
from engine.trainers.script import lines
from engine.trainers.script.layout import FolderLayout
from benchmarks import peak_memory

layout = FolderLayout("step-", "state.pt", 6, frozenset())
log_dir, out_dir, how = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
data = (log_dir / "trainer-002.log").read_bytes() if how == "bytes" else None
before = peak_memory.start()   # this process's own peak from here (benchmarks/peak_memory.py)
if how == "bytes":   # the script trainer's parser, handed a whole log already in memory
    names = lines.announced_folders(data, out_dir, lambda n: n == "final" or layout.step_of(n) is not None)
else:
    names = read_announced(log_dir, out_dir, layout)
grown = (peak_memory.peak_kb() - before) * 1024
print(",".join(sorted(names)), grown)
"""


def _write_logs(log_dir: Path, out_dir: Path, megabytes: int) -> int:
    """trainer-001.log.gz (a rotated launch) and trainer-002.log (the live one), `megabytes` of progress lines
    each with announcements at the start, the middle and the end; returns the live log's size."""
    log_dir.mkdir()
    steps = b"".join(b"runbook: step %d loss 2.%04d took 101.5 ms\n" % (i, i) for i in range(10_000))
    flood = steps * max(1, megabytes * 2**20 // len(steps) // 2)
    def saving(step):
        return b"runbook: saving %s/step-%06d\n" % (str(out_dir).encode(), step)
    (log_dir / "trainer-001.log.gz").write_bytes(gzip.compress(saving(10) + flood + flood + saving(20), compresslevel=1))
    live = saving(30) + flood + saving(40) + flood + saving(50)[:-1]   # the last line not yet ended
    (log_dir / "trainer-002.log").write_bytes(live)
    return len(live)


def _read_in_child(tmp_path: Path, how: str, megabytes: int = 48) -> tuple[str, float]:
    log_dir, out_dir = tmp_path / "logs", tmp_path / "out"
    size = _write_logs(log_dir, out_dir, megabytes)
    done = subprocess.run([sys.executable, "-c", CHILD, str(log_dir), str(out_dir), how], cwd=REPO,
                          capture_output=True, text=True, timeout=120, env={"PYTHONPATH": str(REPO), "PATH": ""})
    assert done.returncode == 0, done.stderr
    names, grown = done.stdout.split()
    return names, int(grown) / size


def test_reading_the_announcements_of_a_large_log_keeps_memory_far_below_the_log_size(tmp_path):
    names, ratio = _read_in_child(tmp_path, "files")
    assert names == "step-000010,step-000020,step-000030,step-000040,step-000050"
    assert ratio < 0.25, f"peak memory grew by {ratio:.2f} x the log's size while reading its announcements"


def test_the_script_parser_given_a_whole_log_does_not_copy_or_split_it(tmp_path):
    names, ratio = _read_in_child(tmp_path, "bytes")
    assert names == "step-000030,step-000040,step-000050"
    assert ratio < 0.25, f"peak memory grew by {ratio:.2f} x the log's size while parsing it"
