"""PE-Study probes: what do position embeddings learn? (Wang & Chen, EMNLP 2020, arXiv 2010.04903).

Two linear probes on a matrix E of position vectors (PAPERS.md section 1) and the paper's figures:
- absolute position regression: rows of E -> position index, least squares, 5-fold CV, mean absolute
  error of the rounded prediction (the sinusoid scores 0.0);
- relative position classification: concat(E[i], E[j]) -> (j > i), logistic regression, 5-fold CV,
  error rate over `pairs` sampled pairs, repeated over seeds (the official 512 pairs move with the seed);
- cosine-similarity heatmap of E, 2-D PCA of E, and the encoding's positional logits per head; for an encoding
  without a logit term of its own (rope, the sinusoid), the first layer's attention logits of a constant input.
E is a pre-trained model's table (`--hf-model`: GPT-2, BERT, RoBERTa through transformers, RoBERTa's padding
offset removed; `--table`: a .npy / .pt file; see lightning_modules/position_tables.py), or the encoding's
table (`.weight`) when it has one, else the first-layer hidden states of a constant input, which is how
table-free encodings (rope, t5_bias, alibi, none) are probed here (TUPE is probed as its table p_0..p_N-1). Caveat:
those encodings act only on attention weights, and attention over a constant input averages identical
values, so their hidden states carry no position: the rows come out identical, which is flagged
(`identical_rows`) and scored at chance instead of fitting float rounding noise.

To run:
    python cli.py probe --encoding rope                       # quick: 512 positions of a 64-wide, 4-head layer
    python cli.py probe --encoding sinusoidal --max-length 512 --dim 768 --num_heads 12 --report out/probe-sin
    python cli.py probe --ckpt out/runs/<run>/checkpoints/last.ckpt --report out/probe-run
    python cli.py probe --hf-model path/to/gpt2 --report out/probe-gpt2     # a folder saved by transformers
    python cli.py probe --table table.npy

Shape legend: N positions, C model width, H heads, L length.
"""

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from sklearn.linear_model import LinearRegression, LogisticRegression
from sklearn.model_selection import KFold

from lightning_modules.arch import ArchConfig
from lightning_modules.encodings import ENCODINGS, PositionalEncoding, check_encoding_name
from lightning_modules.position_tables import check_finite_rows, hf_position_table, load_table_file
from lightning_modules.transformer import Transformer
from pe_core.errors import ConfigError
from pe_sweeps.cli_options import parse_options
from pe_sweeps.layout import RECORD_FILE
from pe_sweeps.probe_options import ProbeOptions
from pe_sweeps.runs.records import read_record, write_record

TABLE = "embedding table"
HIDDEN = "first-layer hidden states of a constant input"
ABS_MAE, REL_ERR = "probe/abs_mae", "probe/rel_err"  # W&B names; REL_ERR gets _mean/_std/_min/_max
HIDDEN_ABS_MAE, HIDDEN_REL_ERROR = "probe/hidden_abs_mae", "probe/hidden_rel_error"
REL_ERROR = "probe/rel_error"  # in a run record: the mean over probe seeds, a fraction (`error`: lower is better)
MIN_LENGTH, MIN_PAIRS, FOLDS = 10, 20, 5
IDENTICAL_RTOL = 1e-4  # rows closer than this (relative to max |E|) differ by float rounding only


@dataclass
class ProbeResult:
    """Both probes on one matrix of position vectors; `source` is TABLE or HIDDEN."""

    encoding: str
    source: str
    positions: int
    width: int
    absolute_mae: float
    relative_errors: list[float]  # one per seed: seed, seed+1, ...
    identical_rows: bool = False  # E carried no position signal (see `collapse_rounding_noise`)
    trained_positions: int | None = None  # a checkpoint's rows 0..this-1 were reached in training (`trained_rows`)
    notes: list[str] = field(default_factory=list)
    figures: list[str] = field(default_factory=list)

    @property
    def chance(self) -> dict[str, float]:
        """What a probe without position information scores: the absolute MAE of always predicting the
        middle position (N/4 for N positions), and a coin flip's relative error."""
        return {"absolute_mae": chance_mae(self.positions), "relative_error": 0.5}

    @property
    def relative(self) -> dict[str, float]:
        """Mean, std (ddof=0), min and max of the relative error over seeds."""
        e = np.asarray(self.relative_errors)
        return {"mean": float(e.mean()), "std": float(e.std()), "min": float(e.min()), "max": float(e.max())}


# ---- probes ---------------------------------------------------------------------------------------


def absolute_position_mae(E: np.ndarray, seed: int = 0) -> float:
    """PE-Study absolute probe: rows of E (N, C), shuffled, -> position; OLS, 5-fold CV; mean over folds
    of the mean absolute error of the rounded prediction."""
    order = np.random.default_rng(seed).permutation(len(E))
    X, y = E[order], order.astype(np.float64)
    errors = []
    for train, test in KFold(FOLDS, shuffle=True, random_state=seed).split(X):
        prediction = LinearRegression().fit(X[train], y[train]).predict(X[test])
        errors.append(np.abs(np.rint(prediction) - y[test]).mean())
    return float(np.mean(errors))


def chance_mae(n: int) -> float:
    """Mean absolute error over positions 0..n-1 of predicting their (rounded) mean: the absolute probe's
    score without any position signal."""
    y = np.arange(n, dtype=np.float64)
    return float(np.abs(np.rint(y.mean()) - y).mean())


def sample_pairs(n: int, pairs: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """`pairs` position pairs (i, j), i != j, each uniform over the n (n - 1) ordered pairs."""
    rng = np.random.default_rng(seed)
    i = rng.integers(0, n, pairs)
    return i, (i + rng.integers(1, n, pairs)) % n


def relative_position_error(E: np.ndarray, pairs: int = 512, seed: int = 0) -> float:
    """PE-Study relative probe: concat(E[i], E[j]) (pairs, 2C) -> (j > i); logistic regression,
    5-fold CV; mean error rate over folds."""
    i, j = sample_pairs(len(E), pairs, seed)
    X, y = np.concatenate([E[i], E[j]], axis=1), (j > i).astype(int)
    errors = []
    for train, test in KFold(FOLDS, shuffle=True, random_state=seed).split(X):
        model = LogisticRegression(max_iter=5000).fit(X[train], y[train])
        errors.append((model.predict(X[test]) != y[test]).mean())
    return float(np.mean(errors))


# ---- position vectors -----------------------------------------------------------------------------


@torch.no_grad()
def first_layer_hidden_states(transformer: Transformer, length: int, token: int = 0) -> torch.Tensor:
    """Output (L, C) of the first block for the constant input `token` repeated `length` times."""
    captured = {}
    hook = transformer.blocks[0].register_forward_hook(lambda m, i, out: captured.setdefault("x", out))
    was_training = transformer.training
    try:
        transformer.eval()
        transformer(torch.full((1, length), token, dtype=torch.long))
    finally:
        hook.remove()
        transformer.train(was_training)
    return captured["x"][0]  # (L, C)


def position_vectors(transformer: Transformer, length: int, token: int, hidden: bool) -> tuple[np.ndarray, str]:
    """E (N, C) in float64 and its source: the encoding's table, else first-layer hidden states."""
    table = getattr(transformer.encoding, "weight", None)
    if table is None or hidden:
        vocab = transformer.token_emb.num_embeddings
        if not 0 <= token < vocab:
            raise ConfigError(f"--token {token} is outside the vocabulary 0..{vocab - 1}")
        return first_layer_hidden_states(transformer, length, token).double().numpy(), HIDDEN
    if length > table.shape[0]:
        raise ConfigError(f"max_length={length} exceeds the {table.shape[0]} rows of the encoding's table")
    return table[:length].detach().double().cpu().numpy(), TABLE


def collapse_rounding_noise(E: np.ndarray, rtol: float = IDENTICAL_RTOL) -> tuple[np.ndarray, bool]:
    """(E, False), or (the mean row repeated, True) when all rows agree up to float rounding.

    For a constant input, encodings that act only on attention weights (rope, t5_bias, alibi,
    none) average identical value vectors, so every first-layer hidden state is the same vector up to
    ~1e-7; least squares would fit that rounding noise (a NoPE model would "decode" position). Exactly
    constant rows score chance level instead: MAE of predicting the mean, majority-class error.
    """
    mean = E.mean(axis=0, keepdims=True)  # (1, C)
    if np.abs(E - mean).max() > rtol * max(float(np.abs(E).max()), 1e-30):
        return E, False
    return np.repeat(mean, len(E), axis=0), True


def build_bare(opts: ProbeOptions, length: int) -> Transformer:
    """A freshly initialised (seeded) 1-layer Transformer around the registry encoding `opts.encoding`."""
    torch.manual_seed(opts.seed)
    if opts.token < 0:  # the bare model's vocabulary is 0..token
        raise ConfigError(f"--token {opts.token} is outside the vocabulary: a token id is >= 0")
    if opts.dim % opts.num_heads:  # the option names, not the architecture's fields
        divisors = [h for h in (1, 2, 4, 8, 12, 16) if opts.dim % h == 0]
        raise ConfigError(f"--dim {opts.dim} is not divisible by --num_heads {opts.num_heads}; with --dim "
                          f"{opts.dim}, give --num_heads one of {', '.join(map(str, divisors))}")  # fmt: skip
    arch = ArchConfig(opts.encoding, dim=opts.dim, depth=1, num_heads=opts.num_heads, vocab_size=opts.token + 1,
                      max_length=length)  # fmt: skip
    return Transformer(arch, causal=opts.causal)


def bare_notes(transformer: Transformer, hidden: bool, seed: int) -> list[str]:
    """What a probe of an untrained encoding means."""
    encoding = transformer.encoding
    notes = [f"bare {encoding.name!r} freshly built from the registry (seed {seed})"]
    if hidden or getattr(encoding, "weight", None) is None:
        notes.append("hidden states come from a randomly initialised, untrained 1-layer Transformer")
    elif encoding.weight.requires_grad:
        notes.append("an untrained learned table is random (its init): the scores are a baseline, not learning")
    return notes


def load_checkpoint(path: str) -> tuple[Transformer, int | None]:
    """The trained Transformer of a task module's checkpoint on the CPU (the module class its hyperparameters
    name, `_class_path`: synthetic, causal LM, masked LM or classifier; SyntheticTaskModel if unnamed) and
    how many positions its training reached (`trained_rows`)."""
    from lightning_modules.checkpoint_io import load_checkpoint as read_checkpoint
    from lightning_modules.synthetic_model import SyntheticTaskModel
    from lightning_modules.task_modules import CLASS_PATHS

    try:
        checkpoint = read_checkpoint(path, "--ckpt")
    except ConfigError as error:
        raise ConfigError(f"cannot load: {error}") from None
    hparams = checkpoint.get("hyper_parameters") or {}
    module = CLASS_PATHS.get(hparams.get("_class_path"), SyntheticTaskModel)
    try:  # built from what was read (plain data), not `load_from_checkpoint`, which would read the file again
        model = module(**{k: v for k, v in hparams.items() if not k.startswith("_")})
        model.on_load_checkpoint(checkpoint)
        model.load_state_dict(checkpoint["state_dict"])
    except Exception as error:  # a checkpoint of another model or version
        reason = type(error).__name__ + ": " + (str(error).strip().splitlines() or [""])[0]
        raise ConfigError(f"cannot load {path!r} as a {module.__name__} checkpoint: {reason}") from error
    if not isinstance(getattr(model, "transformer", None), Transformer):
        raise ConfigError(f"{path!r} is a {module.__name__} checkpoint, which has no single Transformer to probe "
                          "(probe its encoder's table with --table)")  # fmt: skip
    return model.transformer, trained_rows(checkpoint, model.transformer)


def check_length(length: int) -> None:
    if length < MIN_LENGTH:
        raise ConfigError(f"max_length={length} is too short for {FOLDS}-fold probes; need >= {MIN_LENGTH}")


def check_options(opts: ProbeOptions) -> None:
    """One-line ConfigErrors for bad options, before anything is built or loaded."""
    sources = [opts.encoding, opts.ckpt, opts.hf_model, opts.table]
    if sum(source is not None for source in sources) != 1:
        raise ConfigError(f"give exactly one of --encoding ({', '.join(ENCODINGS)}), --ckpt PATH, "
                          "--hf-model NAME_OR_DIR or --table FILE")  # fmt: skip
    if opts.encoding is not None:
        check_encoding_name(opts.encoding)
    if opts.ckpt is not None and not Path(opts.ckpt).is_file():
        raise ConfigError(f"checkpoint {opts.ckpt!r} not found")
    if opts.max_length is not None:
        check_length(opts.max_length)
    if opts.pairs < MIN_PAIRS or opts.seeds < 1:
        raise ConfigError(f"need --pairs >= {MIN_PAIRS} and --seeds >= 1, got {opts.pairs} and {opts.seeds}")


def saved_table(opts: ProbeOptions) -> tuple[np.ndarray, str, list[str]]:
    """E (N, C) in float64 from `--hf-model` or `--table` (its first max_length rows), its name and notes."""
    if opts.hf_model is not None:
        table, name = hf_position_table(opts.hf_model), Path(opts.hf_model.rstrip("/")).name
        notes = [f"pre-trained position table of the Hugging Face model {opts.hf_model}"]
    else:
        table, name = load_table_file(opts.table, "--table"), Path(opts.table).stem
        notes = [f"table read from {opts.table}"]
    length = opts.max_length or table.shape[0]
    check_length(length)
    if length > table.shape[0]:
        raise ConfigError(f"max_length={length} exceeds the {table.shape[0]} rows of the table")
    return table[:length].double().numpy(), name, notes


def trained_rows(checkpoint: dict, transformer: Transformer) -> int | None:
    """How many positions a checkpoint's training inputs reached: the whole sampled range when the encoding
    randomised positions (Ruoss et al. 2023), else the longest training input, which the synthetic and causal
    LM modules save in their checkpoints (`trained_positions`). Rows past it were never trained: a learned
    table keeps its initialisation there. None for a checkpoint that does not record it (saved before)."""
    if getattr(transformer.encoding, "randomize_positions", None):
        return int(transformer.encoding.randomize_positions)
    trained = checkpoint.get("trained_positions")
    return int(trained) if trained is not None else None


def resolve(opts: ProbeOptions) -> tuple[Transformer, int, list[str], int | None]:
    """The transformer to probe, the number of positions, notes on what its scores mean and, for a
    checkpoint, how many positions training reached."""
    check_options(opts)
    if opts.ckpt is None:
        length = opts.max_length or 512
        transformer = build_bare(opts, length)
        return transformer, length, bare_notes(transformer, opts.hidden, opts.seed), None
    transformer, trained = load_checkpoint(opts.ckpt)
    length = opts.max_length or transformer.encoding.max_length
    check_length(length)
    return transformer, length, [f"trained checkpoint {opts.ckpt}"], trained


# ---- figures --------------------------------------------------------------------------------------


def cosine_similarity_matrix(E: np.ndarray) -> np.ndarray:
    """Position-wise cosine similarity (N, N) of the rows of E (the paper's heatmaps)."""
    unit = E / np.maximum(np.linalg.norm(E, axis=1, keepdims=True), 1e-12)
    return unit @ unit.T


def pca_2d(E: np.ndarray) -> np.ndarray:
    """Projection (N, 2) of the centred rows of E on their first two principal directions."""
    centred = E - E.mean(axis=0)
    _, _, vt = np.linalg.svd(centred, full_matrices=False)
    return centred @ vt[:2].T


@torch.no_grad()
def attention_logits(transformer: Transformer, length: int, token: int = 0) -> np.ndarray | None:
    """(H, L, L) the first layer's attention logits, scale * q.k plus every additive term, for the constant
    input `token` repeated `length` times; NaN where a key is masked. With one token everywhere the content is
    the same at every position, so what varies is position alone: for rope q_i.k_j depends on j - i only, for
    the sinusoid it is the table's term through W_q, W_k. None when the layer's attention is not the plain
    scaled dot product (an encoding with its own `attend`, FlexAttention): its logits are not q.k."""
    encoding = transformer.layer_encoding(0)
    if type(encoding).attend is not PositionalEncoding.attend:
        return None
    captured = {}
    plain = encoding.attend

    def attend(q, k, v, mask, *, is_causal, dropout_p, scale, positions):
        logits = scale * (q[0].float() @ k[0].float().transpose(-1, -2))  # (H, L, L)
        if mask is not None:
            mask = mask[0] if mask.dim() == 4 else mask
            logits = logits + mask.float() if mask.is_floating_point() else logits.masked_fill(~mask, -math.inf)
        if is_causal:
            logits = logits.masked_fill(torch.ones_like(logits, dtype=torch.bool).triu(1), -math.inf)
        captured.setdefault("logits", logits)
        return plain(q, k, v, mask, is_causal=is_causal, dropout_p=dropout_p, scale=scale, positions=positions)

    was_training = transformer.training
    encoding.attend = attend  # on this instance only, removed below
    try:
        transformer.eval()
        transformer(torch.full((1, length), token, dtype=torch.long))
    finally:
        del encoding.attend
        transformer.train(was_training)
    if "logits" not in captured:  # FlexAttention: never through `attend`
        return None
    logits = captured["logits"].cpu().numpy()
    return np.where(np.isfinite(logits), logits, np.nan)


def figure_arrays(E: np.ndarray, transformer: Transformer | None, length: int, token: int = 0) -> dict[str, np.ndarray]:
    """The arrays behind the figures: cosine (N, N), pca (N, 2) and, when the encoding has them,
    logits (H, L, L) from `positional_logits` (none for a saved table: `transformer` None); for an encoding
    without a logit term of its own (rope, the sinusoid, ...), attention (H, L, L): the first layer's logits
    of a constant input (`attention_logits`)."""
    arrays = {"cosine": cosine_similarity_matrix(E), "pca": pca_2d(E)}
    logits = None if transformer is None else transformer.encoding.positional_logits(length)
    if logits is not None:
        arrays["logits"] = logits.float().cpu().numpy()
        if transformer.causal:  # keys after the query are masked: no logit there, drawn blank
            query, key = np.triu_indices(length, k=1)
            arrays["logits"][:, query, key] = np.nan
    elif transformer is not None and (attention := attention_logits(transformer, length, token)) is not None:
        arrays["attention"] = attention
    return arrays


def save_figures(
    arrays: dict[str, np.ndarray], name: str, source: str, out_dir: Path, trained: int | None = None
) -> list[Path]:
    """Write one PNG per array (Agg canvas, no pyplot state); returns their paths. `trained`: positions
    from there on were never reached in training, marked in every figure."""
    out_dir.mkdir(parents=True, exist_ok=True)
    plots = {"cosine": plot_cosine, "pca": plot_pca, "logits": plot_logits, "attention": plot_attention}
    paths = []
    for key, array in arrays.items():
        figure = plots[key](array, name if key in ("logits", "attention") else f"{name}, {source}")
        if trained is not None and trained < array.shape[-2]:
            mark_trained(figure, key, trained)
        paths.append(out_dir / f"{key}.png")
        figure.savefig(paths[-1], dpi=100)
    return paths


def mark_trained(figure, key: str, trained: int) -> None:
    """Draw where training's positions end: dashed lines on the heatmaps, and on the PCA the untrained
    positions circled in grey."""
    for ax in figure.axes:
        if ax.get_label() == "<colorbar>":
            continue
        if key == "pca":
            points = ax.collections[0].get_offsets()[trained:]
            ax.scatter(points[:, 0], points[:, 1], s=30, facecolors="none", edgecolors="grey", linewidths=0.6,
                       label=f"positions >= {trained}: never trained")  # fmt: skip
            ax.legend(loc="best", fontsize=8)
        elif ax.images:
            for line in (ax.axvline, ax.axhline):
                line(trained - 0.5, color="black", linestyle="--", linewidth=0.8)


def plot_cosine(cosine: np.ndarray, title: str):
    from matplotlib.figure import Figure

    figure = Figure(figsize=(6, 5), layout="constrained")
    ax = figure.add_subplot()
    image = ax.imshow(cosine, cmap="RdBu_r", vmin=-1, vmax=1)  # signed: diverging, 0 white
    ax.set(title=f"cosine similarity: {title}", xlabel="position", ylabel="position")
    figure.colorbar(image, ax=ax)
    return figure


def plot_pca(points: np.ndarray, title: str):
    from matplotlib.figure import Figure

    figure = Figure(figsize=(6, 5), layout="constrained")
    ax = figure.add_subplot()
    scatter = ax.scatter(points[:, 0], points[:, 1], c=np.arange(len(points)), cmap="viridis", s=6)
    ax.set(title=f"PCA: {title}", xlabel="PC 1", ylabel="PC 2")
    figure.colorbar(scatter, ax=ax, label="position")
    return figure


def plot_attention(logits: np.ndarray, title: str):
    """The first layer's attention logits of a constant input, per head (`attention_logits`)."""
    return plot_logits(logits, title, "first-layer attention logits of a constant input, per head")


def plot_logits(logits: np.ndarray, title: str, what: str = "positional logits per head"):
    from matplotlib.figure import Figure

    heads = logits.shape[0]
    cols = min(4, heads)
    rows = math.ceil(heads / cols)
    figure = Figure(figsize=(3 * cols, 2.8 * rows + 0.4), layout="constrained")
    figure.suptitle(f"{what} (query x key; blank: masked): {title}")
    shown = np.where(np.isfinite(logits), logits, np.nan)
    bound = float(np.nanmax(np.abs(shown))) if np.isfinite(shown).any() else 1.0
    axes = figure.subplots(rows, cols, squeeze=False)
    image = None
    for h, ax in enumerate(axes.flat):
        if h >= heads:
            ax.axis("off")
            continue
        # one diverging scale centred on 0 for every head: signs and magnitudes compare across heads
        image = ax.imshow(shown[h], cmap="RdBu_r", vmin=-bound, vmax=bound)
        ax.set_title(f"head {h}", fontsize=9)
    figure.colorbar(image, ax=axes, label="logit")
    return figure


def write_index(result: ProbeResult, paths: list[Path], out_dir: Path) -> None:
    """index.html listing the figures, and probe.json with the numbers."""
    lines = [
        f"<h1>PE-Study probes: {result.encoding}</h1>",
        f"<p>source: {result.source}; {result.positions} positions x {result.width}</p>",
        f"<p>absolute MAE {result.absolute_mae:.3f} (chance {result.chance['absolute_mae']:.3f}); relative "
        f"error {relative_summary(result)} (chance 50 %)</p>",
        *(
            [f"<p>trained positions: 0-{result.trained_positions - 1} (dashed lines / grey circles mark the rest)</p>"]
            if result.trained_positions and result.trained_positions < result.positions
            else []
        ),  # fmt: skip
        *(f"<p>{note}</p>" for note in result.notes),
        *(f'<h2>{p.stem}</h2><img src="{p.name}">' for p in paths),
    ]
    head = '<html><head><meta charset="utf-8"></head><body>\n'
    (out_dir / "index.html").write_text(head + "\n".join(lines) + "\n</body></html>\n")
    payload = {**asdict(result), "relative": result.relative, "chance": result.chance}
    (out_dir / "probe.json").write_text(json.dumps(payload, indent=2))


def add_to_record(ckpt: str, result: ProbeResult) -> str:
    """The probe's numbers as final (and best) metrics of the run whose checkpoint was probed
    (`<run>/checkpoints/*.ckpt` beside `<run>/record.json`), `probe/hidden_*` for hidden states; a note
    saying what was done."""
    path = Path(ckpt).resolve().parents[1] / RECORD_FILE
    record = read_record(path) if path.is_file() else None
    if record is None:
        return f"not added to a run record: no readable {path}"
    if record.status != "finished":
        return f"not added to {path}: the run is {record.status}, not finished"
    names = (ABS_MAE, REL_ERROR) if result.source == TABLE else (HIDDEN_ABS_MAE, HIDDEN_REL_ERROR)
    numbers = dict(zip(names, (result.absolute_mae, result.relative["mean"])))
    record.final.update(numbers)
    record.best.update(numbers)
    write_record(path, record)
    return f"added {' and '.join(names)} to {path}"


def log_to_wandb(result: ProbeResult, paths: list[Path]) -> None:
    """Log the numbers and figures to the active W&B run, if there is one."""
    import wandb

    if wandb.run is None:
        return
    values = {ABS_MAE: result.absolute_mae, **{f"{REL_ERR}_{k}": v for k, v in result.relative.items()}}
    values.update({f"probe/{p.stem}": wandb.Image(str(p)) for p in paths})
    wandb.log(values)


# ---- entry points ---------------------------------------------------------------------------------


def relative_summary(result: ProbeResult) -> str:
    """`5.67 % ± 1.07 (3.91-7.03 %) over 5 seeds`."""
    r = {k: 100 * v for k, v in result.relative.items()}
    seeds = len(result.relative_errors)
    return f"{r['mean']:.2f} % ± {r['std']:.2f} ({r['min']:.2f}-{r['max']:.2f} %) over {seeds} seeds"


def results_table(result: ProbeResult):
    """A rich table of the absolute MAE and the relative error over seeds, with the source probed."""
    from rich.table import Table

    table = Table(title=f"PE-Study probes (Wang & Chen 2020): {result.encoding}")
    for column in ("source", "positions x width", "absolute MAE (chance)", "relative error: mean ± std (min-max)"):
        table.add_column(column)
    source = result.source + (" (identical rows)" if result.identical_rows else "")
    size = f"{result.positions} x {result.width}"
    mae = f"{result.absolute_mae:.3f} ({result.chance['absolute_mae']:.3f})"
    table.add_row(source, size, mae, f"{relative_summary(result)}; chance 50 %")
    return table


def run_probe(opts: ProbeOptions) -> ProbeResult:
    """Both PE-Study probes (Wang & Chen 2020) on a bare encoding or a checkpoint, plus the report."""
    check_options(opts)
    if opts.hf_model is not None or opts.table is not None:
        transformer, trained = None, None
        E, name, notes = saved_table(opts)
        source, length = TABLE, len(E)
    else:
        transformer, length, notes, trained = resolve(opts)
        name = transformer.encoding.name
        E, source = position_vectors(transformer, length, opts.token, opts.hidden)
    check_finite_rows(E, f"the {source} of {opts.table or opts.hf_model or opts.ckpt or opts.encoding}")
    E, identical = collapse_rounding_noise(E)
    if trained is not None and trained < len(E):
        notes.append(
            f"positions {trained}-{len(E) - 1} were never reached in training (longest training input: {trained} "
            "tokens): marked in the figures; a learned table's rows there are its initialisation"
        )
    if source == HIDDEN:
        notes.append(f"probed: {HIDDEN} (token {opts.token}), not an embedding table")
    if identical:
        notes.append("all rows are identical up to float rounding: no position signal, chance-level scores")
    seeds = range(opts.seed, opts.seed + opts.seeds)
    result = ProbeResult(
        encoding=name, source=source, positions=E.shape[0], width=E.shape[1],
        absolute_mae=absolute_position_mae(E, opts.seed),
        relative_errors=[relative_position_error(E, opts.pairs, s) for s in seeds], identical_rows=identical,
        notes=notes, trained_positions=trained,
    )  # fmt: skip
    paths = []
    if opts.report:
        arrays = figure_arrays(E, transformer, length, opts.token)
        paths = save_figures(arrays, name, source, Path(opts.report), trained)
        result.figures = [str(p) for p in paths]
        write_index(result, paths, Path(opts.report))
    log_to_wandb(result, paths)
    if opts.ckpt is not None and opts.to_record:
        result.notes.append(add_to_record(opts.ckpt, result))
    return result


def probe_main(args: list[str]) -> ProbeResult:
    """`cli.py probe (--encoding NAME | --ckpt PATH | --hf-model NAME_OR_DIR | --table FILE) [--max-length N]
    [--pairs 512] [--seeds 5] ...`"""
    return show_probe(parse_options(ProbeOptions, args))


def show_probe(opts: ProbeOptions) -> ProbeResult:
    """Run the probes of `opts` and print their table, notes and where the figures are."""
    from pe_sweeps.runs.console import app_console

    result = run_probe(opts)
    console = app_console()  # in a file or pipe, nothing wrapped or cut
    console.print(results_table(result))
    lines = [f"note: {note}" for note in result.notes]
    lines += [f"figures: {Path(opts.report) / 'index.html'}"] if result.figures else []
    for line in lines:  # whole lines (paths): only a terminal wraps them, on screen
        console.print(line, highlight=False, soft_wrap=True, markup=False)
    return result
