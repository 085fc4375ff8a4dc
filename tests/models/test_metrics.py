"""The numbers users publish, on hand-built inputs with exact expected values: per-length accuracy and its
summary (`val/acc`, `val/acc_ood`, token accuracy), `val/acc_best`, the LM's `inf` context, BLEU against
sacrebleu's own scorer, and the absolute-position probe on a random table.

Claims of docs/tasks.md covered here:
- "Logged: val/acc_len_<n> and val/tok_acc_len_<n> (exact match, token accuracy ...), val/acc (lengths <=
  train_max_len), val/acc_ood (beyond) ... val/acc_best": test_per_length_exact_and_token_accuracy,
  test_summary_splits_at_train_max_len, test_acc_best_is_the_best_val_acc_so_far
- per-length accuracy "summed across devices": test_states_sum_across_ranks
- "The in-distribution and beyond means weigh every length equally": test_summary_splits_at_train_max_len
- "an encoding that still cannot serve a context gets inf for it and one warning, never a crash":
  test_unservable_context_is_inf_with_one_warning
- "BLEU by torchmetrics' SacreBLEUScore (13a tokenisation, x100)": test_mid_range_bleu_equals_sacrebleu
- probe "Absolute position regression (least squares, 5-fold CV, MAE of the rounded prediction)":
  test_absolute_probe_on_a_random_table_is_at_chance
"""

import math
import warnings

import numpy as np
import pytest
import torch
from sklearn.linear_model import LinearRegression

from lightning_modules import metrics as M
from lightning_modules.arch import ArchConfig
from lightning_modules.causal_lm import CausalLMModel
from lightning_modules.synthetic_model import SyntheticTaskModel
from pe_sweeps.probes import absolute_position_mae

IGN = -100

# Two batches. Positions marked IGN are unsupervised: their (wrong) predictions must not count.
BATCH_1 = (
    torch.tensor([[9, 1, 2, 7], [0, 3, 5, 0], [0, 1, 1, 0]]),  # preds
    torch.tensor([[IGN, 1, 2, IGN], [IGN, 3, 4, IGN], [IGN, 1, 1, 1]]),  # targets
    torch.tensor([2, 2, 3]),  # lengths
)
BATCH_2 = (
    torch.tensor([[5, 0, 0, 0], [8, 2, 2, 2]]),
    torch.tensor([[5, IGN, IGN, IGN], [IGN, 2, 2, 2]]),
    torch.tensor([1, 3]),
)
# length: (exact-match accuracy, token accuracy)
#   1: one example, right                      -> (1/1, 1/1)
#   2: one all right, one with 1 of 2 tokens    -> (1/2, 3/4)
#   3: 2 of 3 tokens right, then 3 of 3 right   -> (1/2, 5/6)
EXPECTED = {1: (1.0, 1.0), 2: (0.5, 0.75), 3: (0.5, 5 / 6)}


def per_length(*batches) -> M.PerLengthAccuracy:
    metric = M.PerLengthAccuracy(max_length=8)
    for batch in batches:
        metric.update(*batch)
    return metric


def test_per_length_exact_and_token_accuracy():
    result = per_length(BATCH_1, BATCH_2).compute()
    assert result.keys() == EXPECTED.keys()  # lengths never seen are absent, not 0/0
    for n, (exact, token) in EXPECTED.items():
        assert result[n] == pytest.approx((exact, token), abs=1e-12), n


def test_states_sum_across_ranks():
    """Two ranks, each with one batch: torchmetrics' DDP sync (gather, then the states' `sum` reduction),
    driven with a gather that returns both ranks' states, gives the single-process result: counts are
    summed, not per-rank accuracies averaged."""
    rank0, rank1 = per_length(BATCH_1), per_length(BATCH_2)
    other = iter([getattr(rank1, state) for state in rank1._reductions])

    def gather(tensor, group=None):  # what torch.distributed.all_gather returns on rank 0
        return [tensor, next(other)]

    rank0.sync(dist_sync_fn=gather, distributed_available=lambda: True)
    assert rank0.examples[:4].tolist() == [0, 1, 2, 2]
    assert rank0.tokens[:4].tolist() == [0, 1, 4, 6]
    result = M.PerLengthAccuracy.compute(rank0)  # the synced states, without a second sync
    assert result.keys() == EXPECTED.keys()
    for n, values in EXPECTED.items():
        assert result[n] == pytest.approx(values), n


def test_summary_splits_at_train_max_len():
    """Length 2 == train_max_len counts in distribution; means are over lengths (each length weighs the same)."""
    summary = M.summarise(EXPECTED, "val", train_max_len=2)
    assert summary == pytest.approx({
        "val/acc_len_1": 1.0, "val/tok_acc_len_1": 1.0,
        "val/acc_len_2": 0.5, "val/tok_acc_len_2": 0.75,
        "val/acc_len_3": 0.5, "val/tok_acc_len_3": 5 / 6,
        "val/acc": 0.75, "val/tok_acc": 0.875,
        "val/acc_ood": 0.5, "val/tok_acc_ood": 5 / 6,
    })  # fmt: skip
    assert "val/acc_ood" not in M.summarise(EXPECTED, "val", train_max_len=3)


def test_standard_errors_are_binomial_per_length_and_pooled():
    """Exact matches 1/1, 1/2 (of 4 examples), 1/2 (of 2): se_n = sqrt(p (1 - p) / n) per length; the mean over
    K lengths has sqrt(sum of se_n^2) / K; a standard error is better low."""
    ses = M.standard_errors(EXPECTED, {1: 1, 2: 4, 3: 2}, "val", train_max_len=2)
    se_2, se_3 = math.sqrt(0.25 / 4), math.sqrt(0.25 / 2)
    assert ses == pytest.approx({
        "val/acc_se_len_1": 0.0, "val/acc_se_len_2": se_2, "val/acc_se_len_3": se_3,
        "val/acc_se": math.sqrt(0.0 + se_2**2) / 2, "val/acc_ood_se": se_3,
    })  # fmt: skip
    assert M.binomial_se(0.69, 160) == pytest.approx(0.03656, abs=1e-5)  # issue 24's 5 lengths x 32 examples
    assert M.goal("val/acc_se") == M.goal("val/acc_ood_se") == M.goal("val/acc_se_len_3") == "min"
    assert M.goal("val/acc") == M.goal("val/acc_len_3") == "max"


class _Trainer:
    """Just what SyntheticTaskModel's epoch-end reads from its trainer."""

    sanity_checking = False

    class datamodule:  # noqa: N801
        train_max_len = 2


def _validate(model: SyntheticTaskModel, preds: torch.Tensor, targets: torch.Tensor, lengths: torch.Tensor) -> dict:
    logged = {}
    model.log_dict = lambda values, **kw: logged.update(values)
    model.log = lambda key, value, **kw: logged.update({key: float(value)})
    model.per_length["val"].update(preds, targets, lengths)
    model.losses["val"].update(torch.tensor(1.0))
    model.on_validation_epoch_end()
    return logged


def test_acc_best_is_the_best_val_acc_so_far():
    model = SyntheticTaskModel(ArchConfig(dim=16, depth=1, num_heads=2, vocab_size=12, max_length=8))
    model._trainer = _Trainer()
    targets, lengths = torch.tensor([[IGN, 1, 2], [IGN, 3, 4]]), torch.tensor([1, 2])
    right, half, wrong = targets.clamp(min=0), torch.tensor([[0, 1, 2], [0, 0, 0]]), torch.zeros(2, 3).long()
    history = [_validate(model, p, targets, lengths) for p in (half, wrong, right, half)]
    assert [h["val/acc"] for h in history] == [0.5, 0.0, 1.0, 0.5]  # states are reset every epoch
    assert [h["val/acc_best"] for h in history] == [0.5, 0.5, 1.0, 1.0]


def test_unservable_context_is_inf_with_one_warning():
    torch.manual_seed(0)
    model = CausalLMModel(ArchConfig("learned", dim=16, depth=1, num_heads=2, vocab_size=11, max_length=8))
    short = {"tokens": torch.randint(0, 11, (2, 8)), "targets": torch.randint(0, 11, (2, 8))}
    long = {"tokens": torch.zeros(2, 16, dtype=torch.long), "targets": torch.zeros(2, 16, dtype=torch.long)}
    logged = {}
    model.log_dict = lambda values, **kw: logged.update(values)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):  # two validation epochs, two long batches each: still one warning per run
            model._eval_step(short, "val")
            model._eval_step(long, "val")
            model._eval_step(long, "val")
            model._eval_epoch_end("val")
            assert logged["val/ppl_ctx_16"] == math.inf
    assert [str(w.message) for w in caught if "positions" in str(w.message)] == [
        "encoding 'learned' serves 8 positions, not 16: val/ppl_ctx_16 is logged as inf"
    ]
    with torch.no_grad():
        expected = model.token_losses(short["tokens"], short["targets"]).mean().item()
    assert logged["val/ppl_ctx_8"] == pytest.approx(math.exp(expected), rel=1e-6)
    assert logged["val/ppl"] == logged["val/ppl_ctx_8"] and logged["val/loss"] == pytest.approx(expected)


def test_mid_range_bleu_equals_sacrebleu():
    """Partial overlaps (BLEU well inside (0, 100)), punctuation for the 13a tokeniser, a short hypothesis
    for the brevity penalty: our x100 value equals sacrebleu's corpus BLEU."""
    sacrebleu = pytest.importorskip("sacrebleu")
    from torchmetrics.text import SacreBLEUScore

    hypotheses = [
        "Ein Mann fährt mit dem Fahrrad.",
        "Zwei Hunde spielen im Schnee, und ein Kind schaut zu.",
        "Eine Frau sitzt auf einer Bank",
        "Kinder spielen Fußball.",
    ]
    references = [
        "Ein Mann fährt auf einem Fahrrad.",
        "Zwei Hunde spielen im Schnee, während ein Kind zuschaut.",
        "Eine Frau sitzt auf einer Parkbank und liest.",
        "Die Kinder spielen auf der Wiese Fußball.",
    ]
    ours = SacreBLEUScore(tokenize="13a")  # as lightning_modules/translation.py builds it
    ours.update(hypotheses, [[r] for r in references])
    theirs = sacrebleu.corpus_bleu(hypotheses, [references], tokenize="13a").score
    assert 20.0 < theirs < 60.0
    assert 100.0 * ours.compute().item() == pytest.approx(theirs, abs=1e-3)


def test_absolute_probe_on_a_random_table_is_at_chance():
    """64 random rows of width 128: least squares can interpolate any table, so scoring on the rows it was
    fitted on gives MAE 0. With held-out folds the MAE must sit at chance (mean |p - mean| = 16)."""
    n = 64
    E = np.random.default_rng(0).standard_normal((n, 128))
    leaky = np.abs(np.rint(LinearRegression().fit(E, np.arange(n)).predict(E)) - np.arange(n)).mean()
    assert leaky == 0.0  # what leakage between folds would report
    chance = np.abs(np.arange(n) - (n - 1) / 2).mean()
    assert chance == 16.0
    assert absolute_position_mae(E, seed=0) >= 0.9 * chance
