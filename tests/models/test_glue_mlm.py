"""Masked-LM pre-training data and module, GLUE data, metrics and fine-tuning from an MLM checkpoint.

Claims of docs/tasks.md covered here:
- "every block is [CLS] + 127 tokens of the packed stream, so [CLS] is always at position 0":
  test_blocks_start_with_cls_and_pack_the_stream (block_size 128: test_presets.py)
- "each non-special token is selected with probability 0.15 (80 % [MASK], 10 % random token, 10 % kept)":
  test_masking_rates_within_tolerance_and_specials_never_masked
- "afresh every epoch for training (dynamic masking) and once, seeded, for validation":
  test_validation_masks_are_fixed_and_training_masks_dynamic
- "post-LN layers, linear warm-up then linear decay": test_linear_warm_up_then_linear_decay (the preset:
  test_presets.py)
- "logged val/loss, val/acc (masked tokens) and val/ppl. Each checkpoint also holds the tokenizer":
  test_fine_tune_loads_the_pretrained_encoder_and_tokenizer
- "SST-2, CoLA, MRPC, RTE, STS-B from the GLUE TSVs under data.data_dir/glue/ (dev = validation; data.hub_name=glue
  online)": test_glue_task_reads_labels_and_batches, test_sst2_dev_is_the_published_split,
  test_unreachable_hub_is_a_one_line_error, test_missing_glue_file_and_unknown_task_are_one_line_errors
- "inputs [CLS] a [SEP] or [CLS] a [SEP] b [SEP] truncated longest-first":
  test_pair_inputs_are_cls_a_sep_b_sep_truncated_longest_first
- "the head reads the [CLS] state (pooling: mean for the mean)"; STS-B "regressed with MSE":
  test_head_reads_the_cls_state_or_the_mean_and_stsb_regresses_with_mse
- "Metrics from torchmetrics, as GLUE: val/acc (SST-2, RTE, MRPC), val/f1 (MRPC), val/mcc (CoLA), val/pearson and
  val/spearman (STS-B ...), and val/score, the task's mean of them": test_glue_metrics_equal_scikit_learn,
  test_fine_tune_loads_the_pretrained_encoder_and_tokenizer, test_from_scratch_classifier_config_trains
- "--model.init_from takes a MaskedLMModel checkpoint or run:NAME (...; {encoding} and other model arguments are
  filled in)"; "the data then uses the checkpoint's tokenizer and max_length":
  test_fine_tune_loads_the_pretrained_encoder_and_tokenizer
- "The checkpoint's encoding and sizes must equal the model's (one-line error naming the difference)":
  test_mismatched_checkpoint_is_a_one_line_error
- "Without init_from, a BPE tokenizer is trained on the task's training sentences and cached":
  test_glue_tokenizer_trains_once_then_loads_from_cache, test_glue_token_ids_are_cached_for_the_next_run
- "unset, untie_cls is on for the masked-LM and classification models ... and off for causal LM, synthetic ...
  models ...; untie_cls: true there is a one-line error. mode: bert_ad is tied by default":
  test_untie_cls_follows_where_cls_sits
"""

import inspect
import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from scipy.stats import pearsonr, spearmanr
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

from datamodules import text
from datamodules.glue import CLS, GLUE_TASKS, SEP, GLUEDataModule, join_segments
from datamodules.masked_lm import MASK, NUM_SPECIAL, MaskedLMDataModule, cls_blocks, mask_tokens
from lightning_modules.arch import ArchConfig
from lightning_modules.classifier import GLUE_METRICS, SequenceClassifier, task_metrics
from lightning_modules.masked_lm import TOKENIZER_KEY, MaskedLMModel
from pe_core.errors import ConfigError
from pe_sweeps.cli import cli_main

MLM_SMALL = {"task": "tinyshakespeare", "tokenizer": "bpe", "vocab_size_limit": 300, "block_size": 16,
             "max_train_blocks": 64, "max_eval_blocks": 8, "batch_size": 8}  # fmt: skip
TINY_MODEL = ["--model.arch.dim=32", "--model.arch.depth=1", "--model.arch.num_heads=4", "--model.arch.ffn_mult=2"]
QUIET = ["--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false"]


@pytest.fixture(autouse=True)
def _tokenizer_cache(tmp_path_factory, monkeypatch):
    """One tokenizer cache for this module, never the user's; W&B off; a fresh run directory per run."""
    monkeypatch.setenv(text.CACHE_ENV, str(tmp_path_factory.getbasetemp() / "tokenizers"))
    monkeypatch.setenv("WANDB_MODE", "disabled")
    monkeypatch.delenv("PE_OUT_ROOT", raising=False)


def test_blocks_start_with_cls_and_pack_the_stream():
    ids = torch.arange(100, 150)
    blocks = cls_blocks(ids, block_size=8)
    assert blocks.shape == (7, 8) and (blocks[:, 0] == CLS).all()
    assert torch.equal(blocks[:, 1:].flatten(), ids[:49])
    dm = MaskedLMDataModule(**MLM_SMALL)
    dm.setup()
    assert dm.train_set.tensors[0].shape == (64, 16) and dm.max_seq_len == 16
    tokens, targets = dm.val_set.tensors
    assert tokens.shape == targets.shape == (8, 16)


def test_masking_rates_within_tolerance_and_specials_never_masked():
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(NUM_SPECIAL, 1000, (400, 128), generator=generator)
    tokens[:, 0] = CLS
    inputs, targets = mask_tokens(tokens, 1000, 0.15, generator)
    selected = targets != -100
    content = tokens.numel() - len(tokens)  # all but the [CLS] column
    assert not selected[:, 0].any() and (inputs[:, 0] == CLS).all()
    assert selected.sum() / content == pytest.approx(0.15, abs=0.005)
    masked = (inputs == MASK) & selected
    kept = (inputs == tokens) & selected
    assert masked.sum() / selected.sum() == pytest.approx(0.8, abs=0.01)
    assert kept.sum() / selected.sum() == pytest.approx(0.1 + 0.1 / 1000, abs=0.01)  # random may redraw itself
    assert torch.equal(targets[selected], tokens[selected]) and torch.equal(inputs[~selected], tokens[~selected])
    assert (inputs >= NUM_SPECIAL).logical_or(inputs == MASK).logical_or(inputs == CLS).all()


def test_validation_masks_are_fixed_and_training_masks_dynamic():
    first, second = MaskedLMDataModule(**MLM_SMALL), MaskedLMDataModule(**MLM_SMALL)
    first.setup(), second.setup()
    assert torch.equal(first.val_set.tensors[1], second.val_set.tensors[1])
    raw = first.train_set.tensors[0][:8]
    one, two = first.on_after_batch_transfer([raw], 0), first.on_after_batch_transfer([raw], 0)
    assert not torch.equal(one["targets"], two["targets"])


def test_pair_inputs_are_cls_a_sep_b_sep_truncated_longest_first():
    assert join_segments([[10, 11, 12]], 8) == [CLS, 10, 11, 12, SEP]
    assert join_segments([[10, 11, 12, 13, 14], [20, 21]], 8) == [CLS, 10, 11, 12, SEP, 20, 21, SEP]
    with pytest.raises(ConfigError, match="too short"):
        join_segments([[1], [2]], 3)


@pytest.mark.parametrize("task", list(GLUE_TASKS))
def test_glue_task_reads_labels_and_batches(task):
    dm = GLUEDataModule(task=task, vocab_size_limit=300, max_length=32, max_train_examples=64, max_eval_examples=32)
    dm.setup()
    batch = next(iter(dm.val_dataloader()))
    assert (batch["tokens"][:, 0] == CLS).all() and batch["tokens"].shape[1] <= 32
    assert torch.equal(batch["padding_mask"], batch["tokens"] != 0)
    labels = torch.tensor(dm.splits["dev"][1])
    if task == "stsb":
        assert dm.num_labels == 1 and 0 <= labels.min() and labels.max() <= 5
    else:
        assert dm.num_labels == 2 and set(labels.tolist()) <= {0.0, 1.0}
    assert [dm.tokenizer.token_to_id(t) for t in text.SPECIAL_TOKENS] == [0, 1, 2, 3, 4]


def test_sst2_dev_is_the_published_split():
    dm = GLUEDataModule(task="sst2", vocab_size_limit=300, max_train_examples=8)
    texts, labels = dm.splits["dev"]
    assert len(texts) == 872 and sum(labels) == 444  # majority baseline 444/872 = 50.9 %
    assert texts[0] == ("it 's a charming and often affecting journey .",)


def test_glue_tokenizer_trains_once_then_loads_from_cache():
    GLUEDataModule(task="rte", vocab_size_limit=300)
    trained = text.TRAIN_COUNT["n"]
    GLUEDataModule(task="rte", vocab_size_limit=300)
    assert text.TRAIN_COUNT["n"] == trained


def test_glue_metrics_equal_scikit_learn():
    assert GLUE_METRICS == {"sst2": ("acc",), "cola": ("mcc",), "mrpc": ("f1", "acc"), "rte": ("acc",),
                            "stsb": ("pearson", "spearman")}  # fmt: skip
    generator = torch.Generator().manual_seed(0)
    preds, labels = torch.randint(0, 2, (200,), generator=generator), torch.randint(0, 2, (200,), generator=generator)
    expected = {"acc": accuracy_score, "f1": f1_score, "mcc": matthews_corrcoef}
    for task in ("sst2", "cola", "mrpc", "rte"):
        values = task_metrics(task, 2)(preds, labels)
        assert set(values) == set(GLUE_METRICS[task])
        for name, value in values.items():
            assert value.item() == pytest.approx(expected[name](labels.numpy(), preds.numpy()), abs=1e-6)
    scores, gold = torch.rand(200, generator=generator) * 5, torch.rand(200, generator=generator) * 5
    values = task_metrics("stsb", 1)(scores, gold)
    assert values["pearson"].item() == pytest.approx(pearsonr(scores, gold)[0], abs=1e-5)
    assert values["spearman"].item() == pytest.approx(spearmanr(scores, gold)[0], abs=1e-5)


def pretrain(tmp_path: Path, encoding: str = "tupe_a") -> Path:
    """A few MLM steps through the CLI, written where a sweep trial would write them (so `run:NAME` from
    tmp_path must search below runs/); returns its last checkpoint."""
    trial_dir = tmp_path / "sweeps" / "mlm" / "trial-0"
    cli_main([
        "fit", "--config=configs/mlm_wikitext2.yaml", f"--model.arch.encoding={encoding}", *TINY_MODEL, *QUIET,
        *[f"--data.{k}={v}" for k, v in MLM_SMALL.items()], "--trainer.max_steps=3", "--trainer.val_check_interval=3",
        f"--run.out_dir={trial_dir}", f"--run.name=pre-{encoding}",
    ])  # fmt: skip
    (checkpoint,) = (trial_dir / "runs").glob("pre-*/checkpoints/last.ckpt")
    record = json.loads(next((trial_dir / "runs").glob("pre-*/record.json")).read_text())
    assert record["task"] == "mlm_tinyshakespeare" and record["status"] == "finished"
    assert {"val/loss", "val/acc", "val/ppl"} <= set(record["final"])
    return checkpoint


@pytest.mark.slow  # trains a model or starts a process
def test_fine_tune_loads_the_pretrained_encoder_and_tokenizer(tmp_path):
    checkpoint = pretrain(tmp_path)
    saved = torch.load(checkpoint, map_location="cpu", weights_only=False)
    assert TOKENIZER_KEY in saved
    vocab_size = saved["hyper_parameters"]["arch"]["vocab_size"]
    arch = ArchConfig("tupe_a", dim=32, depth=1, num_heads=4, ffn_mult=2, post_norm=True, vocab_size=vocab_size,
                      max_length=16)  # fmt: skip
    model = SequenceClassifier(arch, init_from=str(checkpoint))
    for key, value in model.transformer.state_dict().items():
        assert torch.equal(value, saved["state_dict"][f"transformer.{key}"]), key
    cli_main([
        "fit", "--config=configs/glue_finetune.yaml", "--model.arch.encoding=tupe_a", *TINY_MODEL, *QUIET,
        "--model.init_from=run:pre-{encoding}", "--data.task=mrpc", "--data.max_length=16", "--data.batch_size=8",
        "--data.max_train_examples=32", "--data.max_eval_examples=16", "--trainer.max_steps=2",
        "--trainer.val_check_interval=2", f"--run.out_dir={tmp_path}", "--run.name=ft",
    ])  # fmt: skip
    (record,) = (tmp_path / "runs").glob("ft-*/record.json")
    record = json.loads(record.read_text())
    assert record["config"]["model"]["init_args"]["init_from"] == str(checkpoint)  # `run:` resolved
    final = record["final"]
    assert {"val/f1", "val/acc", "val/score", "val/loss"} <= set(final)
    assert final["val/score"] == pytest.approx((final["val/f1"] + final["val/acc"]) / 2)


@pytest.mark.slow  # trains a model or starts a process
def test_mismatched_checkpoint_is_a_one_line_error(tmp_path, capsys):
    checkpoint = pretrain(tmp_path)
    base = ["fit", "--config=configs/glue_finetune.yaml", *TINY_MODEL, f"--model.init_from={checkpoint}",
            "--data.max_length=16", f"--run.out_dir={tmp_path / 'ft'}"]  # fmt: skip
    for change, expected in [
        ("--model.arch.encoding=rope", "arch.encoding='tupe_a' but this model has arch.encoding='rope'"),
        ("--model.arch.dim=64", "arch.dim=32 but this model has arch.dim=64"),
        ("--data.max_length=64", "exceeds the pre-trained model's max_length=16"),
    ]:
        with pytest.raises(SystemExit) as exit_info:
            cli_main([*base, "--model.arch.encoding=tupe_a", change])
        assert exit_info.value.code == 2
        line = capsys.readouterr().err.strip().splitlines()[-1]
        assert line.startswith("error: ") and expected in line, line
    with pytest.raises(SystemExit):
        cli_main([*base, "--model.arch.encoding=rope", "--model.init_from=run:pre-{encoding}"])
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith("error: init_from 'run:pre-{encoding}': no finished run named 'pre-rope'"), line
    with pytest.raises(ConfigError, match="no checkpoint file"):
        GLUEDataModule(task="sst2", init_from=str(tmp_path / "missing.ckpt"))


@pytest.mark.slow  # trains a model or starts a process
@pytest.mark.parametrize("task", ["cola", "stsb"])
def test_from_scratch_classifier_config_trains(task, tmp_path):
    cli_main([
        "fit", "--config=configs/glue_from_scratch.yaml", "--model.arch.encoding=tupe_r", "--model.arch.dim=32", *QUIET,
        f"--data.task={task}", "--data.vocab_size_limit=300", "--data.max_length=32", "--data.batch_size=8",
        "--data.max_train_examples=32", "--data.max_eval_examples=32", "--trainer.max_steps=2",
        "--trainer.val_check_interval=2", f"--run.out_dir={tmp_path}",
    ])  # fmt: skip
    (record,) = Path(tmp_path, "runs").glob("*/record.json")
    final = json.loads(record.read_text())["final"]
    metrics = {"cola": {"val/mcc"}, "stsb": {"val/pearson", "val/spearman"}}[task]
    assert metrics | {"val/score", "val/loss"} <= set(final)


def test_missing_glue_file_and_unknown_task_are_one_line_errors(tmp_path):
    with pytest.raises(ConfigError, match="data file not found: .*train.tsv; point --data.data_dir"):
        GLUEDataModule(task="sst2", data_dir=str(tmp_path))
    with pytest.raises(ConfigError, match="task must be one of 'sst2', 'cola', 'mrpc', 'rte', 'stsb', got 'qqp'"):
        GLUEDataModule(task="qqp")


def test_unreachable_hub_is_a_one_line_error(monkeypatch):
    import datasets

    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach the Hugging Face Hub\nsecond line")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(ConfigError) as error:
        GLUEDataModule(task="sst2", hub_name="glue")
    assert "\n" not in str(error.value) and "--data.data_dir" in str(error.value)


def test_glue_token_ids_are_cached_for_the_next_run(monkeypatch):
    from datamodules import glue

    first = GLUEDataModule(task="mrpc", vocab_size_limit=300, max_length=32, max_train_examples=40)
    first.setup()
    monkeypatch.setattr(glue, "encode_examples", lambda *args: pytest.fail("tokenised again"))
    second = GLUEDataModule(task="mrpc", vocab_size_limit=300, max_length=32, max_train_examples=40)
    second.setup()
    assert second.train_set.ids == first.train_set.ids
    assert second.val_set.ids == first.val_set.ids


@pytest.mark.parametrize("encoding", ["tupe_a", "tupe_r"])
def test_untie_cls_follows_where_cls_sits(encoding):
    """On by default where position 0 holds [CLS] (masked LM, classification), off for causal LM and synthetic
    models (causal or not), where forcing it on is a one-line error."""
    from lightning_modules.causal_lm import CausalLMModel
    from lightning_modules.masked_lm import MaskedLMModel
    from lightning_modules.synthetic_model import SyntheticTaskModel

    small = ArchConfig(encoding, dim=16, depth=1, num_heads=2, vocab_size=20, max_length=16)
    with_options = lambda **options: replace(small, encoding_options=options)
    assert MaskedLMModel(small).encoding.untie_cls is True
    assert SequenceClassifier(small, num_labels=2).encoding.untie_cls is True
    assert MaskedLMModel(with_options(mode="bert_ad")).encoding.untie_cls is False  # BERT-Ad
    without_cls = [CausalLMModel, lambda arch: SyntheticTaskModel(arch, causal=True),
                   lambda arch: SyntheticTaskModel(arch, causal=False)]  # fmt: skip
    for build in without_cls:
        assert build(small).encoding.untie_cls is False
        with pytest.raises(ConfigError, match="untie_cls needs \\[CLS\\] at position 0"):
            build(with_options(untie_cls=True))


def test_linear_warm_up_then_linear_decay():
    from lightning_modules.optim import lr_factor

    factor = lr_factor("linear", warmup_steps=4, total_steps=14)
    assert [factor(step) for step in range(4)] == [0.25, 0.5, 0.75, 1.0]  # linear warm-up
    assert [factor(step) for step in (4, 9, 14, 20)] == [1.0, 0.5, 0.0, 0.0]  # then linear to 0
    defaults = inspect.signature(MaskedLMModel.__init__).parameters  # the model's own defaults: post-LN, linear
    assert defaults["arch"].default.post_norm is True and defaults["lr_decay"].default == "linear"


def test_head_reads_the_cls_state_or_the_mean_and_stsb_regresses_with_mse():
    small = ArchConfig("learned", dim=16, depth=1, num_heads=2, vocab_size=20, max_length=8)
    tokens = torch.tensor([[CLS, 7, 8, SEP, 0, 0], [CLS, 9, SEP, 10, 11, SEP]])
    mask = tokens != 0
    for pooling in ("cls", "mean"):
        torch.manual_seed(0)
        model = SequenceClassifier(small, num_labels=3, pooling=pooling).eval()
        with torch.no_grad():
            hidden = model.transformer(tokens, padding_mask=mask)
            pooled = hidden[:, 0] if pooling == "cls" else (hidden * mask[..., None]).sum(1) / mask.sum(1, True)
            torch.testing.assert_close(model(tokens, mask), model.head(pooled))
    regressor = SequenceClassifier(small, num_labels=1, task="stsb").eval()
    batch = {"tokens": tokens, "padding_mask": mask, "labels": torch.tensor([1.5, 4.0])}
    with torch.no_grad():
        loss, scores = regressor.loss_and_predictions(batch)
    assert scores.shape == (2,)
    torch.testing.assert_close(loss, torch.nn.functional.mse_loss(scores, batch["labels"]))
