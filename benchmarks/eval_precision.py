"""How precise each shipped synthetic evaluation set is, and what it costs.

To run: python benchmarks/eval_precision.py [--p 0.5]

For every sweep file (and config stack) that trains a synthetic task: the evaluation lengths, the examples
per length, the binomial standard error of an exact-match accuracy p measured on them (per length
sqrt(p (1 - p) / n); of `val/acc` and `val/acc_ood`, means over K lengths, sqrt(sum_n p (1 - p) / n_n) / K),
and the model-input tokens of one validation (the cost: a forward pass over each). p = 0.5 is the worst case.
The runs themselves log the same errors measured at their own accuracies (`val/acc_se`, `val/acc_ood_se`,
`val/acc_se_len_<n>`; lightning_modules/metrics.py).
"""

import argparse
import math
from pathlib import Path

import yaml

from datamodules.synthetic import SyntheticDataModule, sequence_length

SWEEPS = ["quickstart", "length_generalization", "tune_length_generalization", "repro_kazemnejad", "chomsky",
          "repro_ruoss"]  # fmt: skip


def data_args(sweep_file: Path) -> dict:
    """The data module's arguments a sweep file's command gives: its --config stack, then its --data.* flags."""
    command = yaml.safe_load(sweep_file.read_text())["command"]
    args = {}
    for i, item in enumerate(command):
        if item == "--config":
            config = yaml.safe_load(Path(command[i + 1]).read_text())
            args.update((config.get("data") or {}).get("init_args") or {})
        elif isinstance(item, str) and item.startswith("--data."):
            key, value = item[len("--data.") :].split("=", 1)
            args[key.removeprefix("init_args.")] = yaml.safe_load(value)
    return args


def precision(dm: SyntheticDataModule, p: float) -> dict:
    per_length = {n: dm.examples_per_length(n) for n in dm.eval_lengths}
    inside = [n for n in per_length if n <= dm.train_max_len]
    beyond = [n for n in per_length if n > dm.train_max_len]

    def pooled(lengths):
        return math.sqrt(sum(p * (1 - p) / per_length[n] for n in lengths)) / len(lengths) if lengths else None

    tokens = sum(
        k * sequence_length(dm.task, n, dm.num_symbols, dm.train_max_len, dm.causal, dm.task_options)
        for n, k in per_length.items()
    )
    return {
        "lengths in / beyond": f"{len(inside)} / {len(beyond)}",
        "examples per length in / beyond": f"{per_length[inside[0]]} / {per_length[beyond[0]] if beyond else '-'}",
        "se per length in / beyond": f"{math.sqrt(p * (1 - p) / per_length[inside[0]]):.4f} / "
        + (f"{math.sqrt(p * (1 - p) / per_length[beyond[0]]):.4f}" if beyond else "-"),
        "se val/acc": f"{pooled(inside):.4f}",
        "se val/acc_ood": f"{pooled(beyond):.4f}" if beyond else "-",
        "examples": sum(per_length.values()),
        "tokens per validation": tokens,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--p", type=float, default=0.5, help="the accuracy the errors are computed at")
    p = parser.parse_args().p
    rows = []
    for name in SWEEPS:
        args = data_args(Path("sweeps") / f"{name}.yaml")
        args.pop("seed", None)
        rows.append({"sweep": name, "task": args.get("task"), **precision(SyntheticDataModule(**args), p)})
    print(f"binomial standard errors at p = {p}")
    print("| " + " | ".join(rows[0]) + " |")
    print("|" + "---|" * len(rows[0]))
    for row in rows:
        print("| " + " | ".join(str(v) for v in row.values()) + " |")


if __name__ == "__main__":
    main()
