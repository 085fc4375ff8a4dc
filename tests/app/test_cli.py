"""`cli.py fit` end to end on the tiny config: every encoding trains, records are written, bad input
is one clear line, runs are reproducible.

Claims of docs/training.md, docs/tasks.md and docs/encodings.md covered here:
- "any --trainer.*, --model.*, --data.* key can be set on the command line or in a YAML file passed with repeated
  --config" (the fit commands of docs/training.md and docs/tasks.md: every encoding, causal or not, every task):
  test_fit_every_encoding, test_fit_every_task
- "The data's vocabulary size and longest sequence are linked into the model and --model.causal into the data, so
  they cannot disagree": test_fit_every_encoding, test_config_saved_with_record,
  test_linked_model_arguments_cannot_be_given
- "A bad encoding, task or option is one line on stderr naming the valid choices (exit code 2)":
  test_bad_names_are_one_line
- learned "positions beyond max_length are a clear error": test_learned_table_too_short_is_clear
- "Every run also leaves out/runs/<name>-<time>-<pid>/ with config.yaml (resolved config), checkpoints/ and
  record.json": test_config_saved_with_record, test_wandb_offline_without_key
- "Generated deterministically from data.seed" (the same seed, the same metrics): test_same_seed_same_metrics
- "val/examples (evaluated examples, summed over DDP ranks)"; "DDP when there are several" GPUs (gloo on CPU here):
  test_ddp_fit_on_two_cpu_processes
- "Without an API key (no WANDB_API_KEY, no ~/.netrc entry) runs are offline; an explicit WANDB_MODE is always
  respected": test_wandb_offline_without_key, test_wandb_mode_is_offline_without_a_key_and_an_explicit_one_is_respected
- bad input "--model.arch.vocab_size (set from the data)": test_linked_model_arguments_cannot_be_given
"""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from pydoc import locate

import pytest
import yaml
from conftest import TINY
from helpers import cli_in_process, fit

from datamodules.registry import DATA_MODULES
from datamodules.synthetic import TASKS
from lightning_modules.encodings import ENCODINGS
from pe_sweeps.cli import cli_main
from pe_sweeps.runs.records import load_records
from pe_sweeps.sweep.trial_child import rejected_option

ROOT = Path(__file__).resolve().parents[2]


# every encoding through the CLI decoder-only; bidirectionally for one of each kind (an additive bias, a rotation, an
# absolute table): the encodings' bidirectional attention is tested per encoding in tests/models (test_transformer,
# test_encodings_batching), and the CLI's path is the same for all
CASES = [(e, True) for e in ENCODINGS] + [(e, False) for e in ("alibi", "rope", "learned")]


@pytest.mark.slow  # trains a model or starts a process
@pytest.mark.parametrize("encoding, causal", CASES)
def test_fit_every_encoding(tiny_fit_args, encoding, causal):
    record = fit([*tiny_fit_args, f"--model.arch.encoding={encoding}", f"--model.causal={causal}"])
    assert record.status == "finished"
    assert record.encoding == encoding and record.task == "copy"
    # TINY's --model.arch.dim=32 --model.arch.depth=1 differ from the model's defaults: named (num_heads=4 does not)
    assert record.name == f"copy-{encoding}-dim=32-depth=1-s0"
    assert record.group == f"pe-sweeps/copy/{encoding}-dim=32-depth=1"
    assert record.config["model"]["init_args"]["causal"] is causal
    assert record.config["data"]["init_args"]["causal"] is causal  # linked
    for key in ("val/acc", "val/acc_ood", "val/loss", "val/acc_len_4", "val/acc_len_8", "val/tok_acc_len_8"):
        assert key in record.final, key
    assert len(record.history) == 2


@pytest.mark.slow  # trains a model or starts a process
@pytest.mark.parametrize("task", TASKS)
def test_fit_every_task(tiny_fit_args, task):
    record = fit([*tiny_fit_args, f"--data.task={task}", "--data.num_symbols=12", "--model.arch.encoding=alibi"])
    assert record.status == "finished" and record.task == task
    assert 0.0 <= record.final["val/acc"] <= 1.0


@pytest.mark.slow  # trains a model or starts a process
def test_same_seed_same_metrics(tiny_fit_args, tmp_path):
    first = fit(tiny_fit_args)
    second = fit([*tiny_fit_args[:-1], f"--run.out_dir={tmp_path / 'again'}"])
    assert first.final == second.final
    third = fit([*tiny_fit_args[:-1], f"--run.out_dir={tmp_path / 'other'}", "--seed_everything=1"])
    assert third.final["val/loss"] != first.final["val/loss"]


def run_cli(*args: str, **env: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "WANDB_MODE": "disabled", "PYTHONPATH": str(ROOT), **env}
    return subprocess.run([sys.executable, "cli.py", *args], cwd=ROOT, env=env, capture_output=True, text=True)


@pytest.mark.slow  # trains a model or starts a process
def test_wandb_offline_without_key(tiny_fit_args, tmp_path):
    """No key, no WANDB_MODE: the run logs offline (in a fresh process: W&B keeps global state)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    result = subprocess.run(
        [sys.executable, "cli.py", *tiny_fit_args], cwd=ROOT, capture_output=True, text=True,
        env={**env, "HOME": str(tmp_path), "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    # issue 29.6: no warning in a default run (W&B's "anonymous setting", Lightning's LeafSpec and srun hints,
    # the config's limit_val_batches notice were in every run)
    noise = [line for line in (result.stdout + result.stderr).splitlines() if re.search(r"(?i)warn|deprecat", line)]
    assert not noise and "limit_val_batches" not in result.stderr, noise
    (record,) = load_records(tmp_path)
    run_dir = Path(record.run_dir)
    (offline,) = list((run_dir / "wandb").glob("offline-run-*"))
    assert any(offline.glob("*.wandb"))
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["model"]["init_args"]["arch"]["encoding"] == "rope"


def test_wandb_mode_is_offline_without_a_key_and_an_explicit_one_is_respected(tmp_path, monkeypatch):
    from pe_sweeps.runs.wandb_setup import default_wandb_mode

    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("NETRC", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    assert default_wandb_mode() == "offline" == os.environ["WANDB_MODE"]  # set for the children too
    monkeypatch.delenv("WANDB_MODE")
    (tmp_path / ".netrc").write_text("machine api.wandb.ai login user password " + "k" * 40 + "\n")
    (tmp_path / ".netrc").chmod(0o600)
    assert default_wandb_mode() == "online"
    for explicit in ("disabled", "offline"):
        monkeypatch.setenv("WANDB_MODE", explicit)
        monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
        assert default_wandb_mode() == explicit


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--model.arch.encoding=nope"], "unknown encoding 'nope'; choose one of: none, learned"),
        (["--data.task=nope"], "--data.task: expected 'copy', 'reverse', 'sort',"),
        (["--model.arch.encoding_options={bogus: 1}"], "encoding 'rope' has no option 'bogus'; its options: base"),
    ],
)
@pytest.mark.slow  # trains a model or starts a process
def test_bad_names_are_one_line(tmp_path, args, expected):
    result = run_cli("fit", "--config=configs/synthetic.yaml", f"--run.out_dir={tmp_path}", *args)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [f"error: {result.stderr.strip()[7:]}"]
    assert expected in result.stderr


@pytest.mark.parametrize(
    "args, expected",
    [
        (["fit", *TINY, "--model.arch.dim=abc"], "--model.arch.dim: expected an integer, got 'abc'"),
        (["fit", *TINY, "--model.lr=fast"], "--model.lr: expected a number, got 'fast'"),
        (["fit", *TINY, "--data.batch_size=1.5"], "--data.batch_size: expected an integer, got '1.5'"),
        (["fit", *TINY, "--trainer.max_steps=abc"], "--trainer.max_steps: expected an integer, got 'abc'"),
        (["fit", *TINY, "--run.wandb=maybe"], "--run.wandb: expected true or false, got 'maybe'"),
        (["fit", *TINY, "--model.arch.encoding_options=[1"], "--model.arch.encoding_options: expected a mapping"),
        (["fit", *TINY, "--model.arch.bogus=1"], "unrecognized arguments: --model.arch.bogus=1"),
        (["fit", "--config=configs/nope.yaml"], "--config: File does not exist"),
        (["fitt"], "unknown command 'fitt'; choose one of: fit, validate, test, predict, sweep, compare, probe"),
        (["sweep", "sweeps/quickstart.yaml", "--workers=abc"], "--workers: expected an integer or 'auto', got 'abc'"),
        (["compare", "--bogus"], "unrecognized arguments: --bogus (options: cli.py compare --help)"),
    ],
)
def test_parse_errors_are_one_line_naming_the_key(args, expected, capsys, monkeypatch):
    """jsonargparse's own report (the usage text, then a nested report of the model's class) is condensed."""
    code, _, err = cli_in_process(args, capsys, monkeypatch, ROOT)
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and err.startswith("error: ") and expected in err, err
    if args[0] == "fit":  # a sweep reads the rejected option from a failed trial's line (FailureStreak)
        option = rejected_option(f"exit code 2: {err.strip()}")
        assert option and any(a.startswith(f"--{option}=") for a in args[1:]), (option, err)


def test_learned_table_too_short_is_clear(tiny_fit_args):
    from lightning_modules.arch import ArchConfig
    from lightning_modules.transformer import Transformer
    from pe_core.errors import ConfigError

    model = Transformer(ArchConfig("learned", dim=16, num_heads=2, vocab_size=8, max_length=4))
    import torch

    with pytest.raises(ConfigError, match="serves positions < 4"):
        model(torch.zeros(1, 6, dtype=torch.long))


@pytest.mark.slow  # trains a model or starts a process
@pytest.mark.slow  # trains a model
def test_a_users_logger_runs_beside_w_and_b(tiny_fit_args, tmp_path, monkeypatch, capsys):
    """Issue 29.2: --trainer.logger=CSVLogger turned W&B off with no word and moved config.yaml into its folder."""
    # W&B in a fresh process (an earlier in-process fit may have set up W&B disabled for the whole process)
    done = run_cli(*tiny_fit_args, "--trainer.logger=CSVLogger", f"--trainer.logger.save_dir={tmp_path / 'csv'}",
                   WANDB_MODE="offline")  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    (record,) = load_records(tmp_path)
    run_dir = Path(record.run_dir)
    assert (run_dir / "config.yaml").is_file() and record.wandb["mode"] == "offline"
    assert list((tmp_path / "csv").rglob("metrics.csv"))  # the user's logger logged too
    args = [a for a in tiny_fit_args if not a.startswith("--run.out_dir=")]
    record = fit([*args, "--trainer.logger=false", f"--run.out_dir={tmp_path / 'off'}"])
    assert "W&B is off: --trainer.logger=false" in capsys.readouterr().out and not record.wandb


def test_config_saved_with_record(tiny_fit_args):
    from datamodules.synthetic import SyntheticDataModule

    # a null inside encoding options stays null (jsonargparse alone turns it into the string 'None')
    record = fit([*tiny_fit_args, "--model.arch.encoding=rope", "--model.arch.encoding_options={rotary_dim: null}"])
    run_dir = Path(record.run_dir)
    saved = json.loads((run_dir / "record.json").read_text())
    assert saved["config"]["seed_everything"] == 0
    assert saved["config"]["model"]["init_args"]["arch"]["encoding_options"] == {"rotary_dim": None}
    assert re.fullmatch(rf"{re.escape(record.name)}-\d{{8}}-\d{{6}}-\d+", run_dir.name)  # <name>-<time>-<pid>
    # one checkpoint, the last state (there were two copies, one of them a "best" chosen by no metric)
    assert [p.name for p in (run_dir / "checkpoints").iterdir()] == ["last.ckpt"]
    resolved = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert resolved["model"]["init_args"]["arch"]["encoding_options"] == {"rotary_dim": None}
    assert resolved["model"]["init_args"]["arch"]["dim"] == 32 and resolved["data"]["init_args"]["train_max_len"] == 4
    data = SyntheticDataModule(**saved["config"]["data"]["init_args"])  # the data's sizes, linked into the model
    model = saved["config"]["model"]["init_args"]["arch"]
    assert (model["vocab_size"], model["max_length"]) == (data.vocab_size, data.max_seq_len)


@pytest.mark.slow  # trains a model
@pytest.mark.parametrize(
    "args, data_seed", [(["--seed_everything=3"], 3), (["--seed_everything=3", "--data.seed=0"], 0)]
)
def test_data_seed_follows_the_seed_unless_given(tiny_fit_args, args, data_seed):
    """The configs' `data.seed: null` becomes the run's seed (data varies with the initialisation), an integer
    fixes the data; the record keeps both seeds and the evaluation's standard errors."""
    record = fit([*tiny_fit_args, "--trainer.max_steps=2", *args])
    assert (record.seed, record.data_seed) == (3, data_seed)
    assert record.config["data"]["init_args"]["seed"] == data_seed
    assert {"val/acc_se", "val/acc_ood_se", "val/acc_se_len_8", "val/acc_constant"} <= set(record.final)
    assert 0 < record.final["val/acc_constant"] < 1  # the evaluation set's own baseline


def test_linked_model_arguments_cannot_be_given():
    """--model.arch.vocab_size and --model.arch.max_length come from the data; given on the line they are refused."""
    from lightning_modules.arg_checks import check_not_linked
    from pe_core.errors import ConfigError

    check_not_linked(["--model.arch.dim=32", "--data.train_max_len=4"])
    for arg in ("--model.arch.vocab_size=3", "--model.arch.max_length=9", "--model.init_args.arch.max_length=9"):
        with pytest.raises(ConfigError, match="is set from .* and cannot be given"):
            check_not_linked(["--model.arch.dim=32", arg])


@pytest.mark.slow
def test_ddp_fit_on_two_cpu_processes(tiny_fit_args, tmp_path, monkeypatch):
    """gloo DDP with 2 processes: one run directory, one record; then the trained checkpoint validated by 2
    processes and by 1 evaluates the same number of examples with the same metrics (reduced across ranks)."""
    result = run_cli(*tiny_fit_args, "--trainer.devices=2", "--trainer.strategy=ddp", "--model.arch.encoding=alibi")
    assert result.returncode == 0, result.stderr[-3000:]
    (record,) = load_records(tmp_path)
    assert record.status == "finished" and str(record.config["trainer"]["devices"]) == "2"
    assert len(record.history) == 2
    (checkpoint,) = Path(record.run_dir).glob("checkpoints/last.ckpt")
    finals = {}
    monkeypatch.chdir(ROOT)
    for devices in (1, 2):
        out = tmp_path / f"validate-{devices}"
        args = [a.replace(f"--run.out_dir={tmp_path}", f"--run.out_dir={out}") for a in tiny_fit_args]
        args = ["validate", *args[1:], "--model.arch.encoding=alibi", f"--ckpt_path={checkpoint}"]
        if devices == 1:  # in this process (DDP needs its own: Lightning's launcher re-runs the command line)
            cli_main([*args, "--trainer.devices=1", "--trainer.strategy=auto"])
        else:
            result = run_cli(*args, f"--trainer.devices={devices}", "--trainer.strategy=ddp")
            assert result.returncode == 0, result.stderr[-3000:]
        (validated,) = load_records(out)
        finals[devices] = {k: v for k, v in validated.final.items() if k.startswith("val/")}
    assert finals[1]["val/examples"] == 8 * 8  # eval_max_len 8 x eval_per_length 8: none dropped or repeated
    assert finals[2].keys() == finals[1].keys()
    for key, value in finals[1].items():
        assert finals[2][key] == pytest.approx(value, rel=1e-5, abs=1e-6), key


# ------------------------------------------------------------------ issue 13, point 4: help and CLI options


def test_top_level_help_lists_every_subcommand(capsys):
    from pe_sweeps import cli

    cli_main(["--help"])
    out = capsys.readouterr().out
    for name in ("fit", "validate", "test", "predict", "sweep", "compare", "probe"):
        assert f"\n  {name} " in out, name
    assert set(cli.SUBCOMMANDS) == {"fit", "validate", "test", "predict", *cli.EXTRA_COMMANDS}


@pytest.mark.parametrize("model", sorted(__import__("lightning_modules.registry").registry.TASK_MODULE_PATHS))
def test_every_model_option_has_a_description_in_help(model, capsys):
    """Issue 29.5: --help listed types without descriptions (the option docs were `#` comments)."""
    with pytest.raises(SystemExit):
        cli_main(["fit", "--model.help", model])
    out = capsys.readouterr().out
    entries = re.split(r"\n  (?=--model\.)", out.split("\n\n", 2)[-1])
    options = [e for e in entries if e.startswith("--model.")]
    assert len(options) >= 8, out  # the arch.* fields and the module's own
    for entry in options:
        text = " ".join(entry.split())
        described = re.match(r"--model\.\S+ \S+ (.+?)\(type:", text)  # name, metavar, then a description
        assert described and described.group(1).strip(), entry
    assert "--model.lr_decay {constant,linear,cosine}" in out  # a choice is listed


@pytest.mark.parametrize("data", sorted(DATA_MODULES))
def test_every_data_option_has_a_description_in_help(data, capsys):
    """Issue 29.5: `--data.help` listed types only; the class line was cut mid-sentence ("evaluate up to:")."""
    with pytest.raises(SystemExit):
        cli_main(["fit", "--data.help", data])
    out = capsys.readouterr().out
    title, options_text = out.split("\n\n", 2)[-1].split("\n  --", 1)
    options_text = "  --" + options_text
    first_paragraph = " ".join(locate(DATA_MODULES[data]).__doc__.split("\n\n")[0].split())
    # whole (jsonargparse shows only a docstring's first line), wrapped between words within the help's width
    assert " ".join(title.split()) == first_paragraph.removesuffix(".") + ":"
    entries = re.split(r"\n  (?=--data\.)", "\n" + options_text)
    options = [e for e in entries if e.startswith("--data.")]
    assert {"--data.batch_size", "--data.seed", "--data.num_workers"} <= {e.split()[0] for e in options}, out
    for entry in options:
        text = " ".join(entry.split())
        described = re.match(r"--data\.\S+ \S+ (.+?)\(type:", text)  # name, metavar, then a description
        assert described and described.group(1).strip(), entry


@pytest.mark.parametrize(
    "module, name",
    [("pe_sweeps.sweep.run", "SweepOptions"), ("pe_sweeps.launchers.slurm", "SlurmOptions"),
     ("pe_sweeps.compare.command", "CompareOptions"), ("pe_sweeps.probes", "ProbeOptions")],
)  # fmt: skip
def test_every_option_of_sweep_compare_probe_has_help_and_choices(module, name):
    import dataclasses
    import importlib

    from pe_sweeps.cli_options import field_help, options_parser

    options = getattr(importlib.import_module(module), name)
    helps = field_help(options)
    assert {f.name for f in dataclasses.fields(options)} == set(helps)
    text = " ".join(options_parser(options).format_help().split())
    for field, text_help in helps.items():
        assert " ".join(text_help.split())[:30] in text, field
    for field, choices in getattr(options, "CHOICES", {}).items():
        assert f"choices: {', '.join(choices)}" in text, field


def test_compare_format_shows_its_choices():
    from pe_sweeps.cli_options import options_parser
    from pe_sweeps.compare.command import CompareOptions

    text = " ".join(options_parser(CompareOptions).format_help().split())
    assert "choices: table, csv, json, markdown, latex" in text and text.startswith("usage: cli.py compare")


def test_short_class_names_are_expanded():
    from pe_sweeps.cli import expand_class_names

    argv = ["fit", "--model.help", "SyntheticTaskModel", "--data=TextDataModule", "--model.arch.dim=SyntheticTaskModel"]
    assert expand_class_names(argv) == [
        "fit", "--model.help", "lightning_modules.synthetic_model.SyntheticTaskModel",
        "--data=datamodules.text.TextDataModule", "--model.arch.dim=SyntheticTaskModel",
    ]  # fmt: skip


def test_fit_help_names_the_model_options_and_short_class_names(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli_main(["fit", "--help"])
    assert exit_.value.code == 0
    assert "--model.help CLASS" in " ".join(capsys.readouterr().out.split())
    with pytest.raises(SystemExit):
        cli_main(["fit", "--model.help", "SyntheticTaskModel"])
    assert "--model.arch.encoding" in capsys.readouterr().out


@pytest.mark.parametrize("arg", ["--optimizer=torch.optim.SGD", "--lr_scheduler.class_path=torch.optim.Adam"])
def test_optimizer_and_lr_scheduler_are_refused_in_one_line(arg, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli_main(["fit", "--config=configs/synthetic.yaml", arg])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert (
        len(err) == 1 and err[0].startswith(f"error: {arg.split('=')[0]} is not supported") and "--model.lr" in err[0]
    )


class Parsed(Exception):
    """Stops a LightningCLI right after parsing (nothing is instantiated)."""


def parsed_trainer_config(args: list[str], monkeypatch) -> dict:
    """The resolved `trainer` section `cli.py ARGS` would save in config.yaml and the record (no trainer built)."""
    from pe_sweeps import cli

    def stop(self):
        raise Parsed(yaml.safe_load(self._parser(self.subcommand).dump(self.config[self.subcommand]))["trainer"])

    monkeypatch.setattr(cli.PECLI, "before_instantiate_classes", stop)
    with pytest.raises(Parsed) as parsed:
        cli.make_cli(args)
    return parsed.value.args[0]


@pytest.fixture
def mocked_cuda(monkeypatch):
    """A CUDA device with bf16 as torch and Lightning's `auto` accelerator see it (no GPU needed); the global
    float32 matmul precision a run sets is restored afterwards."""
    import torch
    from pytorch_lightning.accelerators import CUDAAccelerator

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: True)
    monkeypatch.setattr(CUDAAccelerator, "is_available", staticmethod(lambda: True))
    before = torch.get_float32_matmul_precision()
    yield
    torch.set_float32_matmul_precision(before)


def test_cuda_runs_default_to_bf16_mixed_and_tf32_an_explicit_precision_is_kept(tiny_fit_args, mocked_cuda,
                                                                                monkeypatch):  # fmt: skip
    """Issue 26: on CUDA with bf16 a run that does not set trainer.precision trains in bf16-mixed (SDPA's
    FlashAttention needs fp16 / bf16) with TF32 matmuls, saved in its resolved config; --trainer.precision wins
    (32-true: full fp32 matmuls too)."""
    import torch

    torch.set_float32_matmul_precision("highest")

    def precision(*args: str) -> str | None:
        return parsed_trainer_config([*tiny_fit_args, *args], monkeypatch).get("precision")  # None: not set

    assert precision() == "bf16-mixed"
    assert torch.get_float32_matmul_precision() == "high"
    torch.set_float32_matmul_precision("highest")
    assert precision("--trainer.precision=32-true") == "32-true"
    assert torch.get_float32_matmul_precision() == "highest"
    assert precision("--trainer.precision=16-mixed") == "16-mixed"
    assert precision("--trainer.accelerator=cpu") is None
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: False)  # pre-Ampere
    assert precision() is None


def test_cpu_runs_keep_fp32(tiny_fit_args, monkeypatch):
    import torch
    from pytorch_lightning.accelerators import CUDAAccelerator

    monkeypatch.setattr(CUDAAccelerator, "is_available", staticmethod(lambda: False))
    before = torch.get_float32_matmul_precision()
    assert parsed_trainer_config(tiny_fit_args, monkeypatch).get("precision") is None  # Lightning's 32-true
    assert torch.get_float32_matmul_precision() == before


def test_model_summary_states_the_training_flops_not_lightnings_zero(tiny_fit_args, caplog):
    """Lightning's summary ended "0  Total Flops" in every run (issue 29.6): its row now states 6N + 12ATC."""
    import logging

    from lightning_modules.arch import ArchConfig
    from lightning_modules.synthetic_model import SyntheticTaskModel
    from pe_sweeps.runs.callbacks import training_flops_per_token

    with caplog.at_level(logging.INFO, logger="pytorch_lightning.callbacks.model_summary"):
        fit([*tiny_fit_args, "--trainer.enable_model_summary=true"])
    text = caplog.text
    assert "Training FLOPs per token (6N + 12ATC, PaLM)" in text and "Total Flops" not in text
    model = SyntheticTaskModel(ArchConfig("rope", dim=32, depth=1, num_heads=4, vocab_size=20, max_length=12))
    n = sum(p.numel() for p in model.parameters()) - model.transformer.token_emb.weight.numel()
    assert training_flops_per_token(model, None) == 6 * n + 12 * 1 * 12 * 32


@pytest.mark.parametrize(
    "arg, expected",
    [
        ("--trainer.accumulate_grad_batches=0", "--trainer.accumulate_grad_batches must be an integer in [1, "),
        ("--trainer.val_check_interval=0.0000001", "--trainer.val_check_interval must be an integer >= 1 (training "
         "batches) when --trainer.check_val_every_n_epoch is null"),
        ("--trainer.max_steps=99999999999999999999", "--trainer.max_steps must be an integer in [1, 1000000000] (or"),
        ("--trainer.max_epochs=99999999999999999999", "--trainer.max_epochs must be an integer in [1, 1000000000]"),
    ],
)  # fmt: skip
def test_trainer_options_out_of_range_are_one_line_and_leave_no_run_folder(
    arg, expected, tmp_path, capsys, monkeypatch
):
    """accumulate_grad_batches=0 divided by zero in Lightning after the run folder was made; a fraction of an epoch
    without check_val_every_n_epoch was Lightning's MisconfigurationException; max_steps=10^20 was accepted."""
    out = tmp_path / "out"
    code, _, err = cli_in_process(["fit", *TINY, f"--run.out_dir={out}", arg], capsys, monkeypatch, ROOT)
    assert code == 2 and len(err.strip().splitlines()) == 1 and err.startswith(f"error: {expected}"), err
    assert not out.exists()


FAKE_FIT = ROOT / "tests" / "fake_fit.py"  # a fake trial program: no training, about a second per trial


def fake_sweep_file(folder: Path) -> Path:
    sweep = {
        "program": str(FAKE_FIT), "method": "grid", "metric": {"name": "val/acc", "goal": "maximize"},
        "parameters": {"x": {"values": [1, 2]}, "y": {"values": ["a", "b"]}},
        "command": ["${env}", "${interpreter}", "${program}", "${args}"],
    }  # fmt: skip
    path = folder / "f.yaml"
    path.write_text(yaml.safe_dump(sweep))
    return path


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--heartbeat=10000000000"], "--heartbeat must be an integer in [1, 3600], got 10000000000"),
        (["--seed=-5"], "--seed must be an integer in [0, 4294967295], got -5"),
        (["--seed=4294967296"], "--seed must be an integer in [0, 4294967295], got 4294967296"),
        (["--out_dir="], "--out_dir must name a folder, got ''"),
        (["--storage=sqlite:///{tmp}/missing/dir/db.sqlite"], "no folder {tmp}/missing/dir for the SQLite database"),
    ],
)
def test_sweep_options_out_of_range_are_one_line_and_leave_nothing(args, expected, tmp_path, capsys, monkeypatch):
    """--heartbeat=1e10 killed the heartbeat thread (OverflowError) and the sweep went on without heartbeats;
    --seed=-5 said 'cannot open sweep storage'; an empty --out_dir wrote the study into the working folder's
    sweeps/; a SQLite --storage in a missing folder created that folder."""
    path = fake_sweep_file(tmp_path)
    work = tmp_path / "work"  # the sweep's working folder: an empty --out_dir wrote <work>/sweeps/f/optuna.db
    work.mkdir()
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    out = [] if any(a.startswith("--out_dir") for a in args) else [f"--out_dir={tmp_path / 'out'}"]
    code, _, err = cli_in_process(["sweep", str(path), *out, *args], capsys, monkeypatch, work)
    expected = expected.replace("{tmp}", str(tmp_path))
    assert code == 2 and len(err.strip().splitlines()) == 1 and expected in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.yaml", "work"] and not any(work.iterdir())


@pytest.mark.parametrize(
    "kind, expected",
    [("folder", "is a folder, not a YAML file"), ("fifo", "is a named pipe (FIFO), not a YAML file"),
     ("device", "is a device, not a YAML file"), ("missing", "not found")],
)  # fmt: skip
def test_a_sweep_file_that_is_not_a_regular_file_says_what_it_is(kind, expected, tmp_path, capsys, monkeypatch):
    """A folder, a FIFO and /dev/null were each 'not found'."""
    path = {"folder": tmp_path / "d.yaml", "fifo": tmp_path / "p.yaml", "device": Path("/dev/null"),
            "missing": tmp_path / "none.yaml"}[kind]  # fmt: skip
    if kind == "folder":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    code, _, err = cli_in_process(["sweep", str(path), f"--out_dir={tmp_path / 'out'}"], capsys, monkeypatch, ROOT)
    assert code == 2 and err.strip() == f"error: sweep file {str(path)!r} {expected}", err
    assert not (tmp_path / "out").exists()


@pytest.mark.slow  # starts processes
@pytest.mark.parametrize("command", ["fit", "sweep"])
def test_ctrl_c_during_start_up_is_one_line_and_exit_130(command, tmp_path):
    """SIGINT while the command imports or creates its study printed a 46-50 line KeyboardInterrupt traceback
    and the process died of the signal (exit -2)."""
    if command == "fit":
        args = ["fit", *TINY, f"--run.out_dir={tmp_path / 'out'}"]
    else:
        args = ["sweep", str(fake_sweep_file(tmp_path)), f"--out_dir={tmp_path / 'out'}"]
    env = {**os.environ, "WANDB_MODE": "disabled"}
    for delay in (0.3, 1.0, 2.0):
        child = subprocess.Popen([sys.executable, str(ROOT / "cli.py"), *args], cwd=ROOT, env=env, text=True,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
        time.sleep(delay)
        child.send_signal(signal.SIGINT)
        _, err = child.communicate(timeout=120)
        errors = [line for line in err.splitlines() if line.startswith("error: ")]
        assert child.returncode == 130 and "Traceback" not in err and len(errors) == 1, (delay, err[-2000:])


def test_ctrl_c_inside_an_import_that_swallows_it_still_exits_130(tmp_path):
    """A KeyboardInterrupt raised inside an extension module's import was swallowed and came back as another error
    (numpy's lazy linalg recursing 900 deep, scipy's "ObjSense is already registered"): exit 1 with a traceback,
    seen at 1 s under load. Until the imports are done, Ctrl-C now exits at once."""
    (tmp_path / "swallows.py").write_text(
        "import os, signal\ntry:\n    os.kill(os.getpid(), signal.SIGINT)\n    sum(range(10**6))\n"
        "except BaseException:\n    pass\n"
    )
    code = "from pe_sweeps.exits import exit_at_once_on_ctrl_c\nexit_at_once_on_ctrl_c()\nimport swallows\n"
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"}
    child = subprocess.run([sys.executable, "-c", code, "fit"], env=env, capture_output=True, text=True)
    assert child.returncode == 130 and child.stderr == "error: cli.py fit stopped by SIGINT (Ctrl-C)\n", child


def test_top_level_help_fits_80_columns_and_sweep_help_names_no_internal_function():
    """`cli.py --help` wraps between words within 80 columns; `cli.py sweep --help` explains its options in the
    user's terms, never by naming a function of the code (it said "auto: see `resolve_workers`")."""
    import ast

    from pe_sweeps.cli import SUBCOMMANDS, overview

    text = overview()
    assert max(map(len, text.splitlines())) <= 80
    for description in SUBCOMMANDS.values():  # every word of every description, whole
        assert all(word in text.split() for word in description.split())
    functions = {
        node.name for path in (ROOT / "pe_sweeps").rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.FunctionDef)
    }  # fmt: skip
    out = subprocess.run([sys.executable, str(ROOT / "cli.py"), "sweep", "--help"], capture_output=True, text=True,
                         cwd=ROOT, timeout=120).stdout  # fmt: skip
    named = set(re.findall(r"`(\w+)`", out)) & functions
    assert "--workers" in out and not named, named
