"""What ships besides the code says what the README and docs/ say it does: the setup script and CI, the package's
version ranges and extras, the shipped sweep files' grids and the presets' settings, and the throughput
benchmark's options. Each test reads files only (no training, no process started).

Claims covered here (README.md, docs/index.md, docs/tasks.md, docs/benchmarks.md):
- README Quick start "sweeps alibi, rope, none x passkey x 3 seeds ... val/acc (lengths <= 8, the sweep's
  selection metric and the precondition val/acc >= 0.9) and ... val/acc_ood (every second length from 9 to 31, and
  32; the primary metric)": test_quickstart_sweep_and_its_lengths
- docs/index.md "scripts/setup.sh installs the CPU build of PyTorch 2.13.0 first (the project accepts
  torch>=2.2,<2.15), then the project with its dev extra (pytest, ruff, ... x-transformers and sacrebleu, pinned ...,
  and transformers ...); pip install -e '.[hf]' adds transformers alone":
  test_setup_installs_cpu_torch_first_then_the_dev_extra
- README "CI (.ci/run) runs exactly these two steps' setup and test command":
  test_ci_runs_the_readmes_setup_and_test_command
- docs/tasks.md: Chomsky "The sweep runs every encoding an encoder can (not xpos, cope, fox) x the 15 tasks x 3 seeds
  (855 runs)"; LM "6 encodings x 2 corpora x 2 seeds"; "TUPE's five models are registry entries: BERT-A learned,
  BERT-R bert_r, TUPE-A tupe_a, TUPE-R tupe_r, TUPE-A with tied [CLS] tupe_a_tied" (both TUPE sweeps, the GLUE one
  sending each trial to its own encoding's pre-training with {encoding}); "{sinusoidal, learned, none} x {MR, CR,
  SUBJ, MPQA} x 3 seeds"; "PE-Study's encoder x decoder combinations": test_sweep_grids_are_the_documented_ones
- Causal LM "PE-Study's LM setting (block size 128)": test_lm_presets_train_on_blocks_of_128
- MLM "every block is [CLS] + 127 tokens ...; post-LN layers, linear warm-up then linear decay":
  test_mlm_preset_is_tupes_setting
- "configs/glue_from_scratch.yaml is PE-Study's classifier (1 layer, d=256, 8 heads, FFN 512, length 128, batch 32)";
  "configs/pe_study_cls.yaml is PE-Study's setting: 1 layer, d=256, 8 heads, FFN 512, length 128, Adam lr 1e-4 (AdamW
  with weight decay 0, betas 0.9/0.98), batch 32, 30 epochs, BPE word pieces": test_classifier_presets_are_pe_studys
- docs/benchmarks.md: Throughput "python benchmarks/throughput.py (options: --dim --depth --heads --length --batch
  --encodings --threads --device cpu|cuda --preset bert-base --precision bf16|fp32 --repeats) ... writes JSON and
  markdown under benchmarks/results/ ... --compile": test_throughput_benchmark_takes_the_documented_options
"""

import re

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib
from pathlib import Path

import pytest
import yaml
from helpers import load_module

from lightning_modules.encodings import ENCODINGS
from pe_sweeps.sweep import sweep_file as sf

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def init_args(*configs: str) -> tuple[dict, dict]:
    """(model, data) init_args of configs stacked as repeated --config would stack them."""
    model, data = {}, {}
    for name in configs:
        config = yaml.safe_load((ROOT / "configs" / name).read_text())
        model.update(config.get("model", {}).get("init_args", {}))
        data.update(config.get("data", {}).get("init_args", {}))
    return model, data


def grid(name: str) -> dict[str, set]:
    """Each grid axis of a sweep file -> the set of its values, from the points the runner queues."""
    points = sf.grid_points(sf.load_sweep(ROOT / "sweeps" / name))
    axes = {key: {p[key] for p in points} for key in points[0]}
    assert len(points) == len({tuple(sorted(p.items())) for p in points}), "a point repeats"
    return axes | {"#points": len(points)}


def test_quickstart_sweep_and_its_lengths():
    from datamodules.synthetic import SyntheticDataModule

    axes = grid("quickstart.yaml")
    assert axes == {"model.arch.encoding": {"alibi", "rope", "none"}, "data.task": {"passkey"},
                    "seed_everything": {0, 1, 2}, "#points": 9}  # fmt: skip
    sweep = sf.load_sweep(ROOT / "sweeps" / "quickstart.yaml")
    assert sf.metric_names(sweep) == ["val/acc"]  # chosen and selected on the training lengths only
    assert sweep["compare"] == {"precondition": "val/acc >= 0.9", "primary": "val/acc_ood"}
    assert sweep["command"][-6:] == ["--config", "configs/synthetic.yaml", "--config", "configs/quickstart.yaml",
                                     "--trainer.val_check_interval=200", "${args}"]  # fmt: skip
    _, data = init_args("synthetic.yaml", "quickstart.yaml")
    data = {k: v for k, v in data.items() if k not in ("data_dir",)}
    dm = SyntheticDataModule(**data)  # sizes and lengths are known before setup (nothing generated)
    inside = [n for n in dm.eval_lengths if n <= dm.train_max_len]
    beyond = [n for n in dm.eval_lengths if n > dm.train_max_len]
    assert dm.train_max_len == 8 and max(inside) == 8
    assert beyond == [*range(9, 32, 2), 32]


def test_setup_installs_cpu_torch_first_then_the_dev_extra():
    from packaging.requirements import Requirement

    setup = (ROOT / "scripts" / "setup.sh").read_text()
    installs = [line for line in setup.splitlines() if "pip install" in line and "--upgrade pip" not in line]
    assert [line.split()[-1] for line in installs][:2] == ["torch==2.13.0", '".[dev]"']
    # then W&B's sweep validator alone: its stale numpy<2 pin must not reach the resolver (setup.sh says why)
    assert ["--no-deps", '"sweeps==0.3.0"'] in [line.split()[-2:] for line in installs[2:]]
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = {Requirement(r).name: Requirement(r) for r in project["dependencies"]}
    assert str(requirements["torch"].specifier) == str(Requirement("torch>=2.2,<2.15").specifier)
    assert "2.13.0" in requirements["torch"].specifier
    dev = {Requirement(r).name: Requirement(r) for r in project["optional-dependencies"]["dev"]}
    assert {"pytest", "ruff", "x-transformers", "sacrebleu", "transformers"} <= set(dev)
    for pinned in ("x-transformers", "sacrebleu"):  # a release line: an upper bound
        assert any(spec.operator == "<" for spec in dev[pinned].specifier), pinned
    assert [Requirement(r).name for r in project["optional-dependencies"]["hf"]] == ["transformers"]


def test_ci_runs_the_readmes_setup_and_test_command():
    blocks = re.findall(r"```bash\n(.*?)```", README.split("## Quick start", 1)[1], flags=re.S)
    test_command = next(b.strip() for b in blocks if "pytest" in b)
    setup, test = (step.strip() for step in test_command.split("&&"))
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert setup in ci and test in ci and ci.index(setup) < ci.index(test)


# the encodings chomsky.yaml fixed: those an encoder could run when the study began (a fixed list, so a new
# encoding does not change the 855-point grid)
CHOMSKY_ENCODINGS = {"none", "learned", "sinusoidal", "t5_bias", "alibi", "rope", "tupe_a", "tupe_r",
                     "scaled_sinusoidal", "sinusoidal_learnable", "shaw", "deberta", "kerple_log", "kerple_power",
                     "fire", "dynamic_bias", "bert_r", "tupe_a_tied", "sandwich"}  # fmt: skip
TUPE_FIVE = {"learned", "bert_r", "tupe_a", "tupe_r", "tupe_a_tied"}


@pytest.mark.parametrize(
    "name, expected",
    [
        ("chomsky.yaml", {"model.arch.encoding": CHOMSKY_ENCODINGS, "#tasks": 15, "seed_everything": {0, 1, 2},
                          "#points": 855}),
        ("pe_study_lm.yaml", {"#encodings": 6, "data.task": {"tinyshakespeare", "wikitext2"},
                              "seed_everything": {0, 1}, "#points": 24}),
        ("tupe_mlm.yaml", {"model.arch.encoding": TUPE_FIVE, "#points": 5}),
        ("tupe_glue.yaml", {"model.arch.encoding": TUPE_FIVE, "data.task": {"sst2", "cola", "mrpc", "rte", "stsb"}}),
        ("pe_study_cls.yaml", {"model.arch.encoding": {"sinusoidal", "learned", "none"},
                               "data.preset": {"mr", "cr", "subj", "mpqa"}, "seed_everything": {0, 1, 2},
                               "#points": 36}),
        ("pe_study_mt.yaml", {"#encoder x decoder": 36}),
    ],
)  # fmt: skip
def test_sweep_grids_are_the_documented_ones(name, expected):
    axes = grid(name)
    assert not [n for n in CHOMSKY_ENCODINGS if ENCODINGS[n].causal_only]  # an encoder runs each
    for key, value in expected.items():
        if key == "#tasks":
            assert len(axes["data.task"]) == value
        elif key == "#encodings":
            assert len(axes["model.arch.encoding"]) == value and axes["model.arch.encoding"] <= set(ENCODINGS)
        elif key == "#encoder x decoder":
            assert len(axes["model.arch.encoding"]) * len(axes["model.decoder_encoding"]) == value
        else:
            assert axes[key] == value, key
    if name == "tupe_glue.yaml":  # each trial fine-tunes its own encoding's pre-training run
        init_from = sf.load_sweep(ROOT / "sweeps" / name)["parameters"]["model.init_from"]["value"]
        assert init_from.startswith("run:") and "{encoding}" in init_from


@pytest.mark.parametrize("config", ["lm_tinyshakespeare.yaml", "lm_wikitext2.yaml"])
def test_lm_presets_train_on_blocks_of_128(config):
    model, data = init_args(config)
    assert data["block_size"] == 128 and data.get("eval_factors") in (None, [1, 2, 4])
    assert data.get("eval_stride") is None  # non-overlapping evaluation unless asked


def test_mlm_preset_is_tupes_setting():
    model, data = init_args("mlm_wikitext2.yaml")
    assert data["block_size"] == 128 and data["mask_rate"] == 0.15
    assert model["arch"]["post_norm"] is True and model["warmup_steps"] > 0 and model["lr_decay"] == "linear"


def test_classifier_presets_are_pe_studys():
    from lightning_modules import optim

    for config in ("glue_from_scratch.yaml", "pe_study_cls.yaml"):
        model, data = init_args(config)
        arch = model["arch"]
        assert (arch["depth"], arch["dim"], arch["num_heads"], arch["dim"] * arch["ffn_mult"]) == (1, 256, 8, 512)
        assert (data["max_length"], data["batch_size"], data["tokenizer"]) == (128, 32, "bpe"), config
    model, _ = init_args("pe_study_cls.yaml")
    assert (model["lr"], model["weight_decay"], model["lr_decay"], model["warmup_steps"]) == (1e-4, 0.0, "constant", 0)
    assert yaml.safe_load((ROOT / "configs" / "pe_study_cls.yaml").read_text())["trainer"]["max_epochs"] == 30
    assert "betas=(0.9, 0.98)" in Path(optim.__file__).read_text() and "AdamW" in Path(optim.__file__).read_text()


def test_throughput_benchmark_takes_the_documented_options():
    throughput = load_module("benchmarks/throughput.py")
    args = throughput.parse_args(
        "--dim 64 --depth 2 --heads 4 --length 32 --batch 2 --encodings rope,alibi --threads 1 --device cpu "
        "--repeats 1 --compile".split()
    )
    assert (args.dim, args.depth, args.heads, args.length, args.batch, args.threads, args.repeats) == (
        64, 2, 4, 32, 2, 1, 1,
    )  # fmt: skip
    assert args.encodings == ["rope", "alibi"] and args.device == "cpu" and args.compile
    assert Path(args.out) == Path("benchmarks/results")
    bert = throughput.parse_args(["--preset", "bert-base", "--device", "cuda"])
    assert (bert.dim, bert.depth, bert.heads) == (768, 12, 12) and bert.device == "cuda"
    assert (bert.precision, args.precision) == ("bf16", "fp32")  # the device's default
    assert throughput.parse_args(["--precision", "bf16"]).precision == "bf16"
    assert throughput.parse_args([]).encodings == list(ENCODINGS)
