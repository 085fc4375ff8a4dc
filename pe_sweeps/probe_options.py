"""The options of `cli.py probe`, apart from the probes (pe_sweeps/probes.py: scikit-learn, the Transformer), so
that `probe --help` and a bad option need only the encoding registry's names."""

from dataclasses import dataclass
from typing import ClassVar

from lightning_modules.encodings import ENCODINGS


@dataclass
class ProbeOptions:
    """Options of `cli.py probe` (the PE-Study probes of Wang & Chen 2020)."""

    CHOICES: ClassVar[dict] = {"encoding": tuple(ENCODINGS)}

    encoding: str | None = None  # registry name: probe a freshly built (untrained) encoding
    ckpt: str | None = None  # a synthetic, causal LM, masked LM or classifier checkpoint: its trained encoding
    hf_model: str | None = None  # Hugging Face GPT-2 / BERT / RoBERTa folder (or hub name): its position table
    table: str | None = None  # a (positions, width) table in a .npy or .pt file
    max_length: int | None = None  # positions probed; default 512, the checkpoint's max_length, or all rows
    dim: int = 64  # bare encoding only: a small width for a quick look (the paper's: --dim 768 --num_heads 12)
    num_heads: int = 4  # bare encoding only
    causal: bool = True  # bare encoding only: the 1-layer Transformer used for hidden states
    hidden: bool = False  # probe first-layer hidden states even when the encoding has a table
    token: int = 0  # the constant input token of hidden-state probes
    pairs: int = 512  # pairs of the relative probe (the official code samples 512)
    seed: int = 0  # shuffling, folds, pair sampling and the bare encoding's initialisation
    seeds: int = 5  # relative probe repeated with seed, seed+1, ...
    report: str | None = None  # directory for the PNG figures, index.html and probe.json
    to_record: bool = True  # --ckpt of a finished run: add probe/abs_mae and probe/rel_error (the mean over
    # --seeds) to its record.json's final metrics, so `cli.py compare --metric probe/abs_mae` tabulates them
