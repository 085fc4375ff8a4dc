"""Text LM data (tokenizers, cache, packed blocks, evaluation windows) and the causal LM module.

Claims of docs/tasks.md covered here:
- "train on packed blocks of data.block_size tokens, evaluate perplexity at block_size * f for every f in
  data.eval_factors (default 1, 2, 4) on NON-overlapping windows (stride = window)"; "data.max_train_blocks /
  data.max_eval_tokens cut slices": test_training_blocks_are_packed_and_targets_shifted_by_one,
  test_eval_windows_are_non_overlapping_at_each_context
- "Logged: train/loss, val/loss and val/ppl at the training context, val/ppl_ctx_<n> per context (and test/...)":
  test_few_step_fit_logs_perplexity_per_context
- "--data.eval_stride S (1 <= S <= block_size; default null = non-overlapping only)":
  test_bad_eval_stride_is_one_line_exit_2_and_writes_nothing
- "windows of n tokens moved by S, each token scored exactly once (the same tokens as the non-overlapping mode) with
  at least n - S tokens of context before it": test_sliding_windows_hand_checked,
  test_sliding_windows_score_each_token_once_with_enough_context
- "at n = S it equals val/ppl_ctx_<n>": test_sliding_perplexity_equals_non_overlapping_at_stride_window
- "The model's max_length is linked to the longest context" (data.max_seq_len = block_size * max(eval_factors)):
  test_training_blocks_are_packed_and_targets_shifted_by_one
- "an encoding that still cannot serve a context gets inf for it and one warning, never a crash":
  test_context_beyond_an_encodings_table_is_inf_not_a_crash
- "local files under data.data_dir, resolved against the repository root; data.hub_name for the hub, with a
  one-line hint to use local files when the hub is unreachable": test_data_dir_is_resolved_against_the_repository_root,
  test_missing_file_is_one_line_config_error, test_unreachable_hub_is_one_line_error
- "Splits: tinyshakespeare input.txt 90/5/5 by characters (cut at line breaks); wikitext2 ... train = first 90 % of
  valid.txt, validation = its last 10 %, test = test.txt": test_splits_are_disjoint_and_deterministic,
  test_wikitext2_splits_valid_90_10_and_tests_on_test_txt
- "Tokenizers: char, word (whitespace; line break = <eos>), byte-level bpe (vocab_size_limit); auto = char for
  tinyshakespeare, word for wikitext2; specials [PAD] [CLS] [SEP] [MASK] [UNK]":
  test_tokenizer_trains_once_then_loads_from_cache, test_char_tokenizer_round_trips_and_auto_picks_per_task,
  test_word_tokenizer_splits_on_whitespace_with_eos_lines
- "trained on the training split only and cached under <datasets cache>/pe_tokenizers/ (or $PE_TOKENIZER_CACHE),
  keyed by task, tokenizer, vocabulary limit and the files' size and mtime":
  test_tokenizer_trains_once_then_loads_from_cache,
  test_tokenizer_sees_the_training_split_only_and_is_keyed_by_the_files
- "A bad encoding, task or option is one line": test_unknown_task_and_tokenizer_are_one_line_errors
"""

import json
import math
import os
from pathlib import Path

import pytest
import torch

from datamodules import text
from datamodules.text import TextDataModule
from lightning_modules.arch import ArchConfig
from lightning_modules.causal_lm import CausalLMModel, context_name
from lightning_modules.metrics import goal
from pe_core.errors import ConfigError
from pe_sweeps.cli import cli_main

SMALL = {"block_size": 16, "eval_factors": [1, 2, 4], "max_train_blocks": 8, "max_eval_tokens": 300, "batch_size": 4}


@pytest.fixture(autouse=True)
def _tokenizer_cache(tmp_path_factory, monkeypatch):
    """One tokenizer cache for this module, never the user's."""
    monkeypatch.setenv(text.CACHE_ENV, str(tmp_path_factory.getbasetemp() / "tokenizers"))


@pytest.mark.parametrize("task,kind", [("tinyshakespeare", "char"), ("wikitext2", "word"), ("wikitext2", "bpe")])
def test_tokenizer_trains_once_then_loads_from_cache(task, kind):
    first = TextDataModule(task=task, tokenizer=kind, vocab_size_limit=300, **SMALL)
    trained, stamp = text.TRAIN_COUNT["n"], first.tokenizer_file.stat().st_mtime_ns
    second = TextDataModule(task=task, tokenizer=kind, vocab_size_limit=300, **SMALL)
    assert text.TRAIN_COUNT["n"] == trained and second.tokenizer_file.stat().st_mtime_ns == stamp
    assert second.vocab_size == first.vocab_size <= 300
    assert [second.tokenizer.token_to_id(t) for t in text.SPECIAL_TOKENS] == [0, 1, 2, 3, 4]


def test_char_tokenizer_round_trips_and_auto_picks_per_task():
    dm = TextDataModule(task="tinyshakespeare", **SMALL)
    assert dm.tokenizer_kind == "char" and dm.vocab_size == 65 + len(text.SPECIAL_TOKENS)
    ids = text.encode(dm.tokenizer, "First Citizen:\nBefore")
    assert len(ids) == len("First Citizen:\nBefore")
    assert "".join(dm.tokenizer.id_to_token(i) for i in ids.tolist()) == "First Citizen:\nBefore"
    assert TextDataModule(task="wikitext2", **SMALL).tokenizer_kind == "word"


def test_training_blocks_are_packed_and_targets_shifted_by_one():
    dm = TextDataModule(task="tinyshakespeare", **SMALL)
    dm.setup("fit")
    inputs, targets = dm.train_set.inputs, dm.train_set.targets
    assert inputs.shape == targets.shape == (8, 16)
    assert torch.equal(targets[:, :-1], inputs[:, 1:])
    assert torch.equal(targets[:-1, -1], inputs[1:, 0])  # next block starts where this one's target ends
    batch = next(iter(dm.train_dataloader()))
    assert batch["tokens"].shape == batch["targets"].shape == (4, 16)
    assert dm.max_seq_len == 64 and dm.eval_contexts == [16, 32, 64]


def test_eval_windows_are_non_overlapping_at_each_context():
    dm = TextDataModule(task="wikitext2", **SMALL)
    dm.setup("validate")
    stream = text.encode(dm.tokenizer, dm.texts[1])[:300]
    loaders = dm.val_dataloader()
    assert len(loaders) == 3
    for windows, context in zip(dm.val_sets, [16, 32, 64], strict=True):
        count = (300 - 1) // context
        assert windows.inputs.shape == (count, context)
        assert torch.equal(windows.inputs.flatten(), stream[: count * context])  # stride = window
        assert torch.equal(windows.targets.flatten(), stream[1 : count * context + 1])


def test_splits_are_disjoint_and_deterministic():
    files = {"input": "".join(f"line {i}\n" for i in range(1000))}
    train, val, test = text.split_tinyshakespeare(files)
    assert train + val + test == files["input"] and train.endswith("\n") and val.endswith("\n")
    assert 0.89 < len(train) / len(files["input"]) < 0.91
    assert text.split_tinyshakespeare(files) == (train, val, test)


def test_missing_file_is_one_line_config_error(tmp_path):
    with pytest.raises(ConfigError) as error:
        TextDataModule(task="tinyshakespeare", data_dir=str(tmp_path))
    message = str(error.value)
    assert "\n" not in message and str(tmp_path / "tinyshakespeare" / "input.txt") in message


def test_a_line_longer_than_the_tokenizer_holds_is_one_line(tmp_path, monkeypatch):
    """The tokenizers hold a whole line in memory (about 400 bytes a character at character level): a 1 GB line
    aborted the process. Checked here at a lowered limit; a binary file is one line too."""
    monkeypatch.setattr(text, "MAX_LINE_BYTES", 1000)
    corpus = tmp_path / "tinyshakespeare" / "input.txt"
    corpus.parent.mkdir()
    corpus.write_text("Speak.\n" * 50 + "y" * 1001 + "\n" + "Speak.\n" * 50)
    with pytest.raises(ConfigError, match="input.txt: line 51 is 1,001 bytes; a line is at most 1,000"):
        text.read_corpus("tinyshakespeare", str(tmp_path), None)
    text.check_text_file(corpus, ("Speak.\n" * 50 + "y" * 1000).encode())  # at the limit, last line unended
    corpus.write_bytes(b"Speak.\n\xff\xfe")
    with pytest.raises(ConfigError, match="input.txt is not UTF-8 text \\(byte 7\\)"):
        text.read_corpus("tinyshakespeare", str(tmp_path), None)


def test_unknown_task_and_tokenizer_are_one_line_errors(tiny_fit_args, capsys):
    with pytest.raises(ConfigError, match="--data.task must be one of 'tinyshakespeare', 'wikitext2', got 'ptb'"):
        TextDataModule(task="ptb")
    with pytest.raises(SystemExit) as exit_info:
        cli_main(["fit", "--config=configs/lm_tinyshakespeare.yaml", "--data.task=ptb"])
    assert exit_info.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[-1].startswith("error: --data.task: expected 'tinyshakespeare', 'wikitext2', got 'ptb'")
    with pytest.raises(ConfigError, match="tokenizer must be one of 'auto', 'char', 'word', 'bpe', got 'sentencepi"):
        TextDataModule(tokenizer="sentencepiece")


def test_unreachable_hub_is_one_line_error(monkeypatch):
    import datasets

    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach the Hugging Face Hub\nsecond line")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(ConfigError) as error:
        TextDataModule(task="wikitext2", hub_name="wikitext/wikitext-2-v1")
    assert "\n" not in str(error.value) and "--data.data_dir" in str(error.value)
    assert text._hub_args("wikitext/wikitext-2-v1") == ("wikitext", "wikitext-2-v1")
    assert text._hub_args("karpathy/tiny_shakespeare") == ("karpathy/tiny_shakespeare", None)


def test_context_beyond_an_encodings_table_is_inf_not_a_crash():
    model = CausalLMModel(ArchConfig("learned", dim=16, depth=1, num_heads=2, vocab_size=11, max_length=8))
    batch = {"tokens": torch.zeros(2, 16, dtype=torch.long), "targets": torch.zeros(2, 16, dtype=torch.long)}
    with pytest.warns(UserWarning, match="serves 8 positions, not 16"):
        model._eval_step(batch, "val")
    assert model.unservable["val"] == {(16, None)}
    assert goal("val/ppl") == "min" and context_name("val", 16) == "val/ppl_ctx_16"


@pytest.mark.slow  # trains a model or starts a process
@pytest.mark.parametrize("config", ["lm_tinyshakespeare", "lm_wikitext2"])
@pytest.mark.parametrize("encoding", ["learned", "alibi"])
def test_few_step_fit_logs_perplexity_per_context(config, encoding, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    cli_main([
        "fit", f"--config=configs/{config}.yaml", f"--model.arch.encoding={encoding}", "--model.arch.dim=32",
        "--model.arch.depth=1", "--data.block_size=16", "--data.max_train_blocks=32", "--data.max_eval_tokens=256",
        "--data.batch_size=8", "--data.eval_stride=8", "--trainer.max_steps=3", "--trainer.val_check_interval=3",
        "--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false", f"--run.out_dir={tmp_path}",
    ])  # fmt: skip
    (record,) = Path(tmp_path, "runs").glob("*/record.json")
    final = json.loads(record.read_text())["final"]
    sliding = ["val/ppl_ctx_16_stride_8", "val/ppl_ctx_32_stride_8", "val/ppl_ctx_64_stride_8"]
    for name in ["val/ppl", "val/loss", "val/ppl_ctx_16", "val/ppl_ctx_32", "val/ppl_ctx_64", *sliding]:
        assert torch.isfinite(torch.tensor(final[name])), name
    assert final["val/ppl"] == pytest.approx(final["val/ppl_ctx_16"])
    if encoding == "learned":  # `probe --ckpt` reads a causal LM's table; rows past the block never trained
        from pe_sweeps.probes import TABLE, probe_main

        ckpt = record.parent / "checkpoints" / "last.ckpt"
        result = probe_main(["--ckpt", str(ckpt), "--pairs", "64", "--seeds", "1"])
        assert result.source == TABLE and result.positions == 64 and result.trained_positions == 16


def test_token_ids_are_cached_for_the_next_run(monkeypatch):
    first = TextDataModule(task="tinyshakespeare", **SMALL)
    first.setup("fit")
    calls = []
    monkeypatch.setattr(text, "encode", lambda *args: calls.append(args) or torch.zeros(0))
    second = TextDataModule(task="tinyshakespeare", **SMALL)
    second.setup("fit")
    assert not calls and torch.equal(second.train_set.inputs, first.train_set.inputs)
    assert list(first.tokenizer_file.parent.glob(f"{first.tokenizer_file.stem}-*.ids.npy"))


# ----------------------------------------------------------------------------- sliding-window evaluation


def scored(windows) -> list[tuple[int, list[int]]]:
    """(window start, the target ids it scores) for every window of a SlidingWindows."""
    out = []
    for i in range(len(windows)):
        item = windows[i]
        keep = item["targets"] != text.IGNORE_INDEX
        out.append((int(item["tokens"][0]), item["targets"][keep].tolist()))
    return out


def test_sliding_windows_hand_checked():
    """12 tokens 0..11, window 4: the non-overlapping windows score targets 1..8 (two windows); stride 2 and 3
    score the same eight, each once, a later window only its new targets."""
    ids = torch.arange(12)
    assert scored(text.SlidingWindows(ids, 4, 2)) == [(0, [1, 2, 3, 4]), (2, [5, 6]), (4, [7, 8])]
    assert scored(text.SlidingWindows(ids, 4, 3)) == [(0, [1, 2, 3, 4]), (3, [5, 6, 7]), (4, [8])]
    assert scored(text.SlidingWindows(ids, 4, 1)) == [(0, [1, 2, 3, 4]), (1, [5]), (2, [6]), (3, [7]), (4, [8])]
    window = text.SlidingWindows(ids, 4, 2)[1]
    assert window["tokens"].tolist() == [2, 3, 4, 5] and window["targets"].tolist() == [-100, -100, 5, 6]
    assert int(window["stride"]) == 2


@pytest.mark.parametrize("stride", [1, 3, 7, 16])
def test_sliding_windows_score_each_token_once_with_enough_context(stride):
    L = 16
    ids = torch.randint(5, 60, (300,), generator=torch.Generator().manual_seed(0))
    plain = text.Windows(ids, L)
    sliding = text.SlidingWindows(ids, L, stride)
    items = [sliding[i] for i in range(len(sliding))]
    targets = torch.cat([item["targets"] for item in items])
    assert torch.equal(targets[targets != text.IGNORE_INDEX], plain.targets.flatten())  # once each, in order
    for item in items[1:]:  # a later window: at least L - stride tokens of context before a scored one
        assert (item["targets"][: L - stride] == text.IGNORE_INDEX).all()
    if stride == L:
        assert torch.equal(torch.stack([item["tokens"] for item in items]), plain.inputs)
        assert torch.equal(targets.view(-1, L), plain.targets)


@pytest.mark.filterwarnings("ignore:You are trying to `self.log")
def test_an_lm_evaluation_without_eval_stride_warns_nothing(monkeypatch):
    """Issue 29.6: torchmetrics' "compute before update" in every LM run (the sliding metric, never updated)."""
    import warnings

    model = CausalLMModel(ArchConfig("rope", dim=16, depth=1, num_heads=2, vocab_size=11, max_length=16)).eval()
    ids = torch.randint(0, 11, (70,), generator=torch.Generator().manual_seed(1))
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model._eval_step(torch.utils.data.default_collate(list(text.Windows(ids, 8))), "val")
        values = model._eval_epoch_end("val")
    caught = [str(w.message) for w in caught if "trainer` reference is not registered" not in str(w.message)]
    assert not caught and set(values) >= {"val/ppl_ctx_8", "val/ppl"}  # (self.log without a Trainer: this test's)


def test_sliding_perplexity_equals_non_overlapping_at_stride_window():
    torch.manual_seed(0)
    L, vocab = 8, 11
    model = CausalLMModel(ArchConfig("alibi", dim=16, depth=1, num_heads=2, vocab_size=vocab, max_length=16)).eval()
    ids = torch.randint(0, vocab, (70,), generator=torch.Generator().manual_seed(1))
    batches = lambda data: [torch.utils.data.default_collate([data[i] for i in range(len(data))])]
    with torch.no_grad():
        for data in (text.Windows(ids, L), text.Windows(ids, 2 * L), text.SlidingWindows(ids, L, L),
                     text.SlidingWindows(ids, 2 * L, L)):  # fmt: skip
            for batch in batches(data):
                model._eval_step(batch, "val")
        values = model._eval_epoch_end("val")
    assert values["val/ppl_ctx_8"] == pytest.approx(values["val/ppl_ctx_8_stride_8"], rel=1e-6)
    assert math.isfinite(values["val/ppl_ctx_16_stride_8"])
    assert values["val/ppl_ctx_16_stride_8"] != pytest.approx(values["val/ppl_ctx_16"], rel=1e-6)  # more context
    assert {k for k in values if "ctx" in k} == {"val/ppl_ctx_8", "val/ppl_ctx_16", "val/ppl_ctx_8_stride_8",
                                                 "val/ppl_ctx_16_stride_8"}  # fmt: skip


@pytest.mark.parametrize("stride", ["0", "-3", "17"])
def test_bad_eval_stride_is_one_line_exit_2_and_writes_nothing(stride, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli_main(["fit", "--config=configs/lm_tinyshakespeare.yaml", "--data.block_size=16",
                  f"--data.eval_stride={stride}", f"--run.out_dir={tmp_path}"])  # fmt: skip
    assert exit_info.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert (
        lines[-1] == f"error: eval_stride must be in [1, block_size=16] (the training window; null = "
        f"non-overlapping only), got {stride}"
    )
    assert not any(tmp_path.iterdir())
    with pytest.raises(ConfigError, match="eval_stride must be in"):
        TextDataModule(task="tinyshakespeare", eval_stride=int(stride), **SMALL)


def test_data_dir_defaults_to_the_data_root_from_any_folder(tmp_path, monkeypatch):
    root = Path(__file__).resolve().parents[2]
    monkeypatch.chdir(tmp_path)  # not the current directory
    monkeypatch.delenv("PE_DATA_ROOT", raising=False)
    assert text.resolve_dir(None) == root.parent / "shared" / "data"
    monkeypatch.setenv("PE_DATA_ROOT", str(tmp_path / "elsewhere"))
    assert text.resolve_dir(None) == tmp_path / "elsewhere"
    assert text.resolve_dir(str(tmp_path)) == tmp_path
    folder = tmp_path / "wikitext-2"
    folder.mkdir()
    for name in ("valid.txt", "test.txt"):
        (folder / name).write_text("x\n")
    assert text.corpus_paths("wikitext2", ".")["test"] == Path("wikitext-2/test.txt")  # a given folder: as given
    with pytest.raises(ConfigError, match="data file not found"):
        text.corpus_paths("wikitext2", None)  # the data root ($PE_DATA_ROOT) holds no wikitext-2/


def test_wikitext2_splits_valid_90_10_and_tests_on_test_txt():
    valid = "".join(f"= line {i} =\n" for i in range(100))
    train, val, test = text.split_wikitext2({"valid": valid, "test": "held out\n"})
    assert train + val == valid and test == "held out\n"
    assert train.endswith("\n") and 0.89 < len(train) / len(valid) < 0.91


def test_word_tokenizer_splits_on_whitespace_with_eos_lines():
    tokenizer, trainer = text.new_tokenizer("word", 100)
    tokenizer.train_from_iterator(["the cat sat\non the mat\n"], trainer=trainer)
    ids = text.encode(tokenizer, "the  cat\nsat")
    assert [tokenizer.id_to_token(i) for i in ids.tolist()] == ["the", "cat", "<eos>", "sat"]


def test_tokenizer_sees_the_training_split_only_and_is_keyed_by_the_files(tmp_path, monkeypatch):
    monkeypatch.setenv(text.CACHE_ENV, str(tmp_path / "cache"))
    corpus = tmp_path / "data" / "tinyshakespeare" / "input.txt"
    corpus.parent.mkdir(parents=True)
    corpus.write_text("abc cab\n" * 95 + "xyz Z\n" * 5)  # 'Z' only in the last 5 %: the test split
    small = dict(task="tinyshakespeare", data_dir=str(tmp_path / "data"), block_size=4, eval_factors=[1])
    dm = TextDataModule(**small)
    assert dm.tokenizer.token_to_id("a") is not None and dm.tokenizer.token_to_id("Z") is None
    assert dm.tokenizer_file.parent == tmp_path / "cache"
    trained = text.TRAIN_COUNT["n"]
    assert TextDataModule(**small).tokenizer_file == dm.tokenizer_file and text.TRAIN_COUNT["n"] == trained
    assert TextDataModule(**small, vocab_size_limit=50).tokenizer_file != dm.tokenizer_file
    stat = corpus.stat()
    os.utime(corpus, (stat.st_atime, stat.st_mtime + 10))  # the same text, a newer file: a new tokenizer
    newer = TextDataModule(**small)
    assert newer.tokenizer_file != dm.tokenizer_file and text.TRAIN_COUNT["n"] == trained + 2
    assert "tinyshakespeare" in newer.tokenizer_file.name and "char" in newer.tokenizer_file.name
    monkeypatch.delenv(text.CACHE_ENV)
    import datasets

    assert text.tokenizer_cache_dir() == Path(datasets.config.HF_DATASETS_CACHE) / "pe_tokenizers"
