"""sweep/core_claims.py: a sweep started beside another on the same cores says in one warning line that their
trials' threads exceed the cores (before: no word, and a trial ran at ~1/8 of its speed alone)."""

import json
import os
import subprocess
import sys

import pytest

from pe_sweeps.sweep.children import process_started as started
from pe_sweeps.sweep.core_claims import CoreClaim, oversubscribed


@pytest.fixture
def other_process():
    """A live process that is not this one (a claim's owner)."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield process.pid
    process.kill()
    process.wait()


def claim_of(folder, pid, cores, threads, sweep="first", **extra):
    folder.mkdir(exist_ok=True)
    (folder / f"cores-{pid}.json").write_text(
        json.dumps({"pid": pid, "cores": cores, "threads": threads, "sweep": sweep, **extra})
    )


def mine():
    return sorted(os.sched_getaffinity(0))


def test_a_second_sweep_on_the_same_cores_warns_in_one_line(tmp_path, other_process, capsys):
    claim_of(tmp_path, other_process, mine(), len(mine()))  # the first sweep: all the cores' threads
    with CoreClaim(2, "second", folder=tmp_path) as claim:
        assert json.loads(claim.path.read_text())["threads"] == 2  # its own claim, while it runs
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("warning: 1 other sweep(s) already train on these"), err
    assert f"pid {other_process} (first" in err[0] and "--threads_per_trial" in err[0]
    assert not (tmp_path / f"cores-{os.getpid()}.json").exists()  # removed at the end


def test_sweeps_that_fit_their_cores_stay_quiet(tmp_path, other_process, capsys):
    claim_of(tmp_path, other_process, mine(), 1)
    with CoreClaim(max(1, len(mine()) - 1), "second", folder=tmp_path):
        pass
    assert capsys.readouterr().err == ""


def test_a_dead_sweeps_claim_is_removed_and_ignored(tmp_path, capsys):
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = int(done.stdout)
    claim_of(tmp_path, dead, mine(), 64)
    with CoreClaim(len(mine()), "second", folder=tmp_path):
        pass
    assert capsys.readouterr().err == ""
    assert not (tmp_path / f"cores-{dead}.json").exists()


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="process start times are read from /proc")
def test_a_claim_whose_pid_was_reused_is_stale(tmp_path, other_process, capsys):
    """The sweep that wrote the claim is gone and an unrelated process now has its pid (before: a spurious warning
    naming that process as a sweep). The claim's start time tells them apart; the owner's own claim still counts."""
    assert started(other_process) is not None
    claim_of(tmp_path, other_process, mine(), 64, started=started(other_process) - 1)
    with CoreClaim(len(mine()), "second", folder=tmp_path):
        pass
    assert capsys.readouterr().err == ""
    assert not (tmp_path / f"cores-{other_process}.json").exists()
    claim_of(tmp_path, other_process, mine(), 64, started=started(other_process))
    with CoreClaim(len(mine()), "third", folder=tmp_path) as claim:
        assert json.loads(claim.path.read_text())["started"] == started(os.getpid())
    assert capsys.readouterr().err.startswith("warning: 1 other sweep(s)"), "the live owner's claim was dropped"


def test_a_sweep_on_other_cores_does_not_count(tmp_path, other_process, capsys):
    """SLURM tasks on one node: each its own cpuset."""
    claim_of(tmp_path, other_process, [max(mine()) + 1, max(mine()) + 2], 64)
    with CoreClaim(len(mine()), "second", folder=tmp_path):
        pass
    assert capsys.readouterr().err == ""
    assert "4 threads on 2 cores" in oversubscribed(
        [{"pid": 1, "cores": [0, 1], "threads": 2, "sweep": "a"}], 2, {0, 1}
    )


def test_a_folder_others_may_write_to_is_not_used(tmp_path, other_process, capsys):
    """In a shared /tmp another user could make the folder first (with a link in it to a file of ours)."""
    folder = tmp_path / "claims"
    claim_of(folder, other_process, mine(), 64)
    folder.chmod(0o777)
    with CoreClaim(2, "second", folder=folder) as claim:
        assert not claim.path.exists()
    assert capsys.readouterr().err == ""
