"""scripts/gpu_check.sh, the prepared GPU check (issue 26): its CPU dry run (GPU_CHECK_CPU=1, as CI runs it) runs
every section at tiny sizes and writes the JSON a GPU session pastes from; sections fail alone.

Claims of docs/benchmarks.md covered here:
- "GPU_CHECK_CPU=1 bash scripts/gpu_check.sh runs the same sections on the CPU at tiny sizes":
  test_dry_run_runs_every_section, test_dry_run_covers_the_encoding_registry, test_dry_run_sweep_ddp_and_benchmarks
- "each section has its own time limit; one that fails records its error and the others still run":
  test_a_failing_section_records_its_error, test_a_process_past_its_limit_is_stopped
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import load_module

from lightning_modules.encodings import ENCODINGS

ROOT = Path(__file__).resolve().parents[2]


gpu_check = load_module("scripts/gpu_check.py")


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    """The whole CPU dry run, once: (its JSON report, its printed output)."""
    out = tmp_path_factory.mktemp("gpu_check")
    env = {**os.environ, "GPU_CHECK_CPU": "1", "OUT": str(out), "PYTHON": sys.executable}
    done = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh")], cwd=out, env=env, capture_output=True,
                          text=True, timeout=900)  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return json.loads((out / "gpu_check.json").read_text()), done.stdout


@pytest.mark.slow
def test_the_dry_run(dry_run):
    """One test over the one dry run (as three, pytest-xdist's workers each ran the module fixture: 3 minutes)."""
    check_every_section(*dry_run)
    check_the_encoding_registry(dry_run[0])
    check_sweep_ddp_and_benchmarks(dry_run[0])


def check_every_section(report, printed):
    assert report["mode"] == "cpu" and report["device"]["status"] == "ok" and report["device"]["torch"]
    assert list(report["sections"]) == list(gpu_check.SECTIONS)
    for name, section in report["sections"].items():
        allowed = ("ok", "missing") if name == "step_overhead" else ("ok",)  # missing until i26-fast's benchmark
        assert section["status"] in allowed, (name, section)
        assert section["wall_s"] >= 0 and section["summary"]
        assert f"  {name} " in printed
    if (ROOT / "benchmarks" / "step_overhead.py").exists():
        assert report["sections"]["step_overhead"]["status"] == "ok"


def check_the_encoding_registry(report):
    section = report["sections"]["encodings"]
    assert section["encodings"] == list(ENCODINGS) and not section["errors"]
    cases = [(c["encoding"], c["causal"]) for c in section["cases"]]
    assert cases == [(n, c) for n in ENCODINGS for c in (True, False) if c or not ENCODINGS[n].causal_only]
    for case in section["cases"]:
        fp32, bf16 = case["fp32"], case["bf16"]
        # on the CPU the fp32 model is the reference itself: the same computation, no difference at all
        assert fp32["out_max_abs_diff"] == 0 and fp32["grad_max_rel_diff"] == 0, case
        assert 0 < bf16["out_max_abs_diff"] <= gpu_check.TOLERANCE["bf16"], case  # autocast did change the math
        assert bf16["parity_ok"] and fp32["ms"] > 0, case
        # an encoding whose attention is not a softmax (stick-breaking) computes its own: no SDPA kernel to see
        assert bool(fp32["kernels"]) == ENCODINGS[case["encoding"]].softmax_attention, case
    rope = next(c for c in section["cases"] if c["encoding"] == "rope" and c["causal"])
    t5 = next(c for c in section["cases"] if c["encoding"] == "t5_bias")
    assert rope["fp32"]["kernels"] in (["flash (cpu)"], ["math"]) and t5["fp32"]["kernels"] == ["math"]


def check_sweep_ddp_and_benchmarks(report):
    sections = report["sections"]
    trials = sections["sweep"]["trials"]
    assert [t["state"] for t in trials] == ["COMPLETE", "COMPLETE"]
    assert all(t["start"] in ("warm", "cold") and t["device"] == "cpu" for t in trials)
    assert "--workers 2" in sections["sweep"]["options"]
    fit = sections["ddp"]["fit"]
    assert (fit["world_size"], fit["backend"], fit["status"]) == (2, "gloo", "finished")
    assert sections["ddp"]["nccl"]["status"] == "skipped"
    assert sections["pytest_gpu"]["exit_code"] == 0 and "failed" not in sections["pytest_gpu"]["counts"]
    rows = sections["throughput"]["rows"]
    assert [r["encoding"] for r in rows] == sections["throughput"]["encodings"] and "--precision bf16" in (
        sections["throughput"]["options"]
    )
    assert all(r["ours"]["tokens_per_s"] > 0 and r["ratio"]["median"] > 0 for r in rows)


def test_a_failing_section_records_its_error():
    setup = gpu_check.Setup(gpu_check.parse_args(["--cpu"]))

    def broken(setup, result):
        result["partial"] = 1
        raise ValueError("boom")

    result = gpu_check.run_section(broken, setup, "encodings")
    assert result["status"] == "error" and result["error"] == "ValueError: boom" and result["partial"] == 1
    assert result["wall_s"] >= 0
    assert gpu_check.run_section(lambda s, r: r.update(status="missing"), setup, "step_overhead")["status"] == "missing"


def test_a_process_past_its_limit_is_stopped():
    with pytest.raises(gpu_check.SectionTimeout, match="ran past 1 s"):
        gpu_check.run(["bash", "-c", "sleep 60"], limit=1)


def test_kernel_labels():
    label = gpu_check.kernel_label
    assert label("aten::_scaled_dot_product_flash_attention_for_cpu") == "flash (cpu)"
    assert label("aten::_scaled_dot_product_flash_attention_backward") == "flash"
    assert label("aten::_scaled_dot_product_efficient_attention") == "efficient"
    assert label("aten::_scaled_dot_product_cudnn_attention") == "cudnn"
    assert label("aten::_scaled_dot_product_attention_math") == "math"
    assert label("triton_tem_fused_0") == "triton template" and label("aten::mm") is None


@pytest.mark.parametrize("backend", ["FLASH_ATTENTION", "MATH"])
def test_kernel_names_from_the_kineto_result_are_the_profilers_events(backend):
    """The CPU dry run reads event names from the profile's Kineto result (`kineto_event_names`); a GPU run reads
    `prof.events()`: the same events, so the same attention kernels."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q = torch.randn(1, 2, 8, 4, requires_grad=True)
    with sdpa_kernel(getattr(SDPBackend, backend)), torch.profiler.profile() as prof:
        F.scaled_dot_product_attention(q, q, q, is_causal=True).sum().backward()
    events = {event.name for event in prof.events()}
    names = gpu_check.kineto_event_names(prof)
    assert "aten::scaled_dot_product_attention" in events and events <= names
    labels = {gpu_check.kernel_label(name) for name in names} - {None}
    assert labels == {gpu_check.kernel_label(name) for name in events} - {None}
    assert labels == {"flash (cpu)" if backend == "FLASH_ATTENTION" else "math"}


def test_bad_arguments_name_the_choices(capsys):
    for argv, message in ((["--limit", "bogus=3"], "SECTION one of: device, encodings"),
                          (["--only", "nope"], "unknown section 'nope'; choose from: encodings")):  # fmt: skip
        with pytest.raises(SystemExit):
            gpu_check.parse_args(argv)
        assert message in capsys.readouterr().err
