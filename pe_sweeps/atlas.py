"""The atlas (issue 49): every registered encoding x every synthetic task x seeds, as one sweep file written from
the registries (`python scripts/make_atlas.py` writes sweeps/atlas.yaml and sweeps/atlas_pilot.yaml), so a new
encoding or task joins by regenerating it (tests/app/test_atlas.py fails until it is).

Every task gets the same declared budget (BUDGET: configs/quickstart.yaml's model, width 64, 2 layers, 4 heads,
STEPS steps) and the same data settings (DATA). Each task column has a compare precondition, "in-distribution
val/acc above that task's chance level", where chance is the exact-match accuracy of the best input-blind answer
(per in-distribution length, that length's most frequent answer; datamodules/synthetic.constant_accuracy, what the
runs log as val/acc_constant) on the very validation examples the atlas's runs draw, averaged over its seeds: the
task registry knows the answers its generators give, not an output alphabet, so the chance level is measured
on them rather than derived from a vocabulary size. A cell failing it is marked, never ranked.
"""

import math
from pathlib import Path

import numpy as np
import yaml

from pe_core.errors import ConfigError

SEEDS = (0, 1)
STEPS = 300  # training steps per trial, every task
PILOT_ENCODINGS = ("rope", "alibi", "none")  # the pilot's representative encodings
PILOT_SEEDS = (0,)
DATA = {  # on top of configs/synthetic.yaml and configs/quickstart.yaml; the chance levels are computed on these
    "min_len": 1,
    "train_max_len": 8,
    "eval_max_len": 16,
    "eval_length_stride": 2,
    "num_symbols": 11,  # the fewest every task accepts (polynomial_evaluation, solve_equation: 11)
    "train_size": 19200,  # 300 steps x batch 64: one pass, no example seen twice
    "eval_per_length": 32,
    "eval_per_train_length": 64,
}
CAUSAL = True  # configs/synthetic.yaml's decoder
ATLAS_PATH = Path("sweeps/atlas.yaml")
PILOT_PATH = Path("sweeps/atlas_pilot.yaml")
COMMAND = "python scripts/make_atlas.py"


def encodings() -> tuple[list[str], dict[str, str]]:
    """The registered encodings the atlas trains, and those left out with the reason (one that cannot be built
    from its name alone: a required option such as a table to load)."""
    from lightning_modules.encodings import ENCODINGS, check_encoding

    kept, left_out = [], {}
    for name in ENCODINGS:
        try:
            check_encoding(name, {})
        except ConfigError as error:
            left_out[name] = str(error)
            continue
        kept.append(name)
    return kept, left_out


def eval_lengths() -> list[int]:
    """The in-distribution validation lengths of DATA, in the order the data module draws them."""
    d = DATA
    every = {
        *range(d["min_len"], d["eval_max_len"] + 1, d["eval_length_stride"]),
        d["train_max_len"],
        d["eval_max_len"],
    }
    return [n for n in sorted(every) if n <= d["train_max_len"]]


def chance_level(task: str, seeds=SEEDS) -> float:
    """The task's chance level at DATA: the best input-blind answer's exact-match accuracy on the runs' own
    in-distribution validation examples (the prefix of the validation set, drawn as SyntheticDataModule draws it
    with the run's seed), averaged over `seeds`."""
    from datamodules.synthetic import constant_accuracy, make_examples, sequence_length, split_options

    d = DATA
    sequence_length(task, d["eval_max_len"], d["num_symbols"], d["train_max_len"], CAUSAL)  # the task's own errors
    lengths = [n for n in eval_lengths() for _ in range(d["eval_per_train_length"])]
    options = split_options(task, {}, False)
    levels = []
    for seed in seeds:
        rng = np.random.default_rng([seed, 1])
        examples = make_examples(task, lengths, rng, d["num_symbols"], d["train_max_len"], CAUSAL, options)
        levels.append(constant_accuracy(examples, d["train_max_len"]))
    return sum(levels) / len(levels)


def tasks(seeds=SEEDS) -> tuple[dict[str, float], dict[str, str]]:
    """The synthetic tasks with their chance levels over `seeds`, and those left out with the reason (the task
    cannot run at DATA's lengths and vocabulary)."""
    from datamodules.tasks import TASKS

    kept, left_out = {}, {}
    for name in TASKS:
        try:
            kept[name] = chance_level(name, seeds)
        except (ConfigError, ValueError) as error:
            left_out[name] = str(error).splitlines()[0]
    return kept, left_out


def threshold(chance: float) -> float:
    """`chance` rounded up to 4 decimals: `val/acc > threshold` is then above chance, never at it."""
    return math.ceil(chance * 10_000) / 10_000


def command(steps: int = STEPS) -> list[str]:
    """The trials' command: the quickstart model on the synthetic config at the declared budget."""
    data = [f"--data.{key}={value}" for key, value in DATA.items()]
    return ["${env}", "${interpreter}", "${program}", "fit", "--config", "configs/synthetic.yaml", "--config",
            "configs/quickstart.yaml", f"--trainer.max_steps={steps}", f"--trainer.val_check_interval={steps}",
            *data, "${args}"]  # fmt: skip


def header(kind: str, n_enc: int, n_tasks: int, seeds, left_enc: dict, left_tasks: dict, name: str) -> list[str]:
    """The file's comment header: what it spans, its budget, what is left out and why, how to run and compare."""
    runs = n_enc * n_tasks * len(seeds)
    lines = [
        f"GENERATED by `{COMMAND}` from the encoding and task registries: do not edit; regenerate after adding an",
        "encoding or a task (tests/app/test_atlas.py fails until this file is what the generator writes).",
        f"{kind}: {n_enc} encodings x {n_tasks} synthetic tasks x seeds {list(seeds)} = {runs} runs.",
        f"Budget, the same for every task: configs/quickstart.yaml's model (width 64, 2 layers, 4 heads), {STEPS} "
        "training steps,",
        f"batch 64, trained on lengths {DATA['min_len']}..{DATA['train_max_len']} and validated to "
        f"{DATA['eval_max_len']} ({DATA['eval_per_train_length']} examples per in-distribution length).",
        "Precondition per task (compare: marked, never ranked, when it fails): in-distribution val/acc above the",
        "task's chance level, the exact-match accuracy of the best input-blind answer (per length its most frequent",
        "answer; the runs log it as val/acc_constant) on the runs' own validation examples, averaged over the seeds.",
    ]
    if kind == "PILOT":
        lines += [
            "Judged on in-distribution validation (val/acc) only: it records whether this budget lets at least one",
            "of rope, alibi, none learn each task (a task where all three fail its precondition needs more steps).",
        ]
    lines.append("Left out: " + ("none" if not left_enc and not left_tasks else ""))
    lines += [f"  encoding {k}: {v}" for k, v in left_enc.items()]
    lines += [f"  task {k}: {v}" for k, v in left_tasks.items()]
    if not left_enc:
        lines.append("  (no encoding needs a download or a pre-trained table: `learned`'s init_from is optional)")
    lines += [
        "Run (from the checkout), then compare:",
        f"  python cli.py sweep sweeps/{name}.yaml --dry-run --workers 2     # the plan: trials and hours",
        f"  python cli.py sweep sweeps/{name}.yaml --workers 2",
        f"  python cli.py compare --sweep {name} --metric val/acc",
    ]
    return ["# " + line if line else "#" for line in lines]


def sweep(name: str, encoding_names: list[str], chances: dict[str, float], seeds) -> dict:
    """The sweep file's content (without its header)."""
    preconditions = [f"{task}:val/acc > {threshold(c):.4f}" for task, c in chances.items()]
    return {
        "name": name,
        "program": "cli.py",
        "method": "grid",
        "metric": {"name": "val/acc", "goal": "maximize"},
        "compare": {"primary": "val/acc", "precondition": preconditions},
        "parameters": {
            "model.arch.encoding": {"values": list(encoding_names)},
            "data.task": {"values": list(chances)},
            "seed_everything": {"values": list(seeds)},
        },
        "command": command(),
    }


def render(kind: str, name: str, encoding_names, chances, seeds, left_enc, left_tasks) -> str:
    """One sweep file's text: header, then the YAML."""
    lines = header(kind, len(encoding_names), len(chances), seeds, left_enc, left_tasks, name)
    body = yaml.safe_dump(sweep(name, encoding_names, chances, seeds), sort_keys=False, width=120)
    return "\n".join(lines) + "\n" + body


def atlas_files() -> dict[Path, str]:
    """{path: text} of sweeps/atlas.yaml and sweeps/atlas_pilot.yaml as the registries make them now."""
    enc, left_enc = encodings()
    chances, left_tasks = tasks(SEEDS)
    pilot_chances, _ = tasks(PILOT_SEEDS)
    pilot = [e for e in PILOT_ENCODINGS if e in enc]
    return {
        ATLAS_PATH: render("ATLAS", "atlas", enc, chances, SEEDS, left_enc, left_tasks),
        PILOT_PATH: render("PILOT", "atlas_pilot", pilot, pilot_chances, PILOT_SEEDS, left_enc, left_tasks),
    }


def write_atlas(root: Path) -> list[Path]:
    """Write the atlas files under `root` (the checkout); returns their paths."""
    written = []
    for path, text in atlas_files().items():
        (root / path).write_text(text)
        written.append(root / path)
    return written
