"""Multi30k translation: joint tokenizer and cache, shifted batches, greedy and beam decoding, BLEU, source
padding, every encoding on the decoder side, and `cli.py fit` with independent encoder/decoder encodings.

Claims of docs/tasks.md covered here:
- "Encoder-decoder Transformer whose encoder and decoder self-attention carry independent registered encodings
  (cross-attention has no positional term)": test_few_step_fit_with_independent_encodings,
  test_every_encoding_decodes, test_source_padding_changes_nothing_at_real_positions,
  test_cross_attention_has_no_positional_term_and_embeddings_are_tied
- "xpos is causal-only and so decoder-only": test_xpos_encoder_is_a_one_line_error, test_every_encoding_decodes
- "One joint byte-level BPE over the English and German training text; tied embeddings":
  test_joint_tokenizer_trains_once_then_loads_from_cache,
  test_cross_attention_has_no_positional_term_and_embeddings_are_tied
- "Decoding without a KV cache (correct for every encoding): greedy, and batched beam search (beam_size, default 5,
  score = mean token log-probability)": test_greedy_and_beam_return_valid_sequences_and_beam_one_is_greedy,
  test_exhaustive_beam_finds_the_best_hypothesis_and_never_loses_to_greedy, test_every_encoding_decodes,
  test_cross_attention_has_no_positional_term_and_embeddings_are_tied
- "BLEU by torchmetrics' SacreBLEUScore (13a tokenisation, x100) on detokenised output":
  test_bleu_is_100_for_perfect_and_0_for_disjoint_predictions, test_batches_are_padded_and_targets_shifted
- "val/bleu greedy on the first val_bleu_batches batches, test/bleu beam and test/bleu_greedy on test_2016_flickr;
  val/loss, val/ppl token NLL": test_test_step_logs_beam_and_greedy_bleu, test_few_step_fit_with_independent_encodings
- "A run is named and compared by <encoder>+<decoder>": test_few_step_fit_with_independent_encodings
- TUPE's [CLS] untying "off for ... translation models ...; untie_cls: true there is a one-line error":
  test_cross_attention_has_no_positional_term_and_embeddings_are_tied
"""

import itertools
import json
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch

from datamodules import text
from datamodules.translation import BOS, EOS, IGNORE_INDEX, PAD, TranslationDataModule
from lightning_modules.arch import ArchConfig
from lightning_modules.encodings import ENCODINGS
from lightning_modules.translation import NEVER_GENERATED, TranslationModel
from pe_core.errors import ConfigError
from pe_sweeps.cli import cli_main
from tests.helpers import randomize_

SMALL = {
    "vocab_size_limit": 500,
    "max_length": 128,
    "max_train_examples": 200,
    "max_eval_examples": 16,
    "batch_size": 8,
}
TINY_ARCH = {"dim": 32, "depth": 1, "num_heads": 4, "dropout": 0.0, "max_length": 32}  # + decoder_depth 1


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("tokenizers")


@pytest.fixture(autouse=True)
def _tokenizer_cache(tokenizer_dir, monkeypatch):
    """One tokenizer cache for this module, never the user's."""
    monkeypatch.setenv(text.CACHE_ENV, str(tokenizer_dir))


@pytest.fixture(scope="module")
def dm(tokenizer_dir):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(text.CACHE_ENV, str(tokenizer_dir))
        data = TranslationDataModule(**SMALL)
    data.setup()
    return data


def tiny_model(vocab_size: int, encoder="sinusoidal", decoder="sinusoidal", seed=0, **kwargs) -> TranslationModel:
    torch.manual_seed(seed)
    arch = ArchConfig(encoder, vocab_size=vocab_size, **TINY_ARCH)
    model = TranslationModel(arch, decoder_encoding=decoder, decoder_depth=1, **kwargs)
    return randomize_(model, seed).eval()


def check_hypotheses(hyps: torch.Tensor, max_len: int) -> None:
    """Rows are real tokens, then (optionally) EOS, then only PAD; nothing never-generated."""
    assert hyps.shape[1] <= max_len
    for row in hyps.tolist():
        end = row.index(EOS) + 1 if EOS in row else len(row)
        assert all(t not in NEVER_GENERATED for t in row[:end]), row
        assert all(t == PAD for t in row[end:]), row


# --- data ------------------------------------------------------------------------------------------------


def test_joint_tokenizer_trains_once_then_loads_from_cache(tmp_path, monkeypatch):
    monkeypatch.setenv(text.CACHE_ENV, str(tmp_path))
    first = TranslationDataModule(**SMALL)
    trained, stamp = text.TRAIN_COUNT["n"], first.tokenizer_file.stat().st_mtime_ns
    assert first.tokenizer_file.parent == tmp_path
    second = TranslationDataModule(**SMALL)
    assert text.TRAIN_COUNT["n"] == trained and second.tokenizer_file.stat().st_mtime_ns == stamp
    assert second.vocab_size == first.vocab_size <= 500 and second.max_seq_len == 128
    assert [second.tokenizer.token_to_id(t) for t in text.SPECIAL_TOKENS] == [0, 1, 2, 3, 4]
    for sentence in ["Zwei Männer stehen am Straßenrand.", "Two men stand at the roadside."]:  # lossless, both
        ids = second.tokenizer.encode(sentence, add_special_tokens=False).ids
        assert second.tokenizer.decode(ids) == sentence
    vocab = second.tokenizer.get_vocab()
    assert "Ġthe" in vocab and "Ġder" in vocab  # English and German merges in one vocabulary


def test_batches_are_padded_and_targets_shifted(dm):
    batch = next(iter(dm.val_dataloader()))
    src, src_mask, tgt_in, tgt_out = batch["src"], batch["src_mask"], batch["tgt_in"], batch["tgt_out"]
    B = len(batch["ref"])
    assert B == 8 and src.shape == src_mask.shape and tgt_in.shape == tgt_out.shape and tgt_in.shape[0] == B
    assert src_mask.dtype == torch.bool and torch.equal(src_mask, src != PAD) and src_mask[:, 0].all()
    assert src.shape[1] <= 128 and tgt_in.shape[1] <= 128
    assert (tgt_in[:, 0] == BOS).all()
    for row_in, row_out in zip(tgt_in.tolist(), tgt_out.tolist()):
        n = sum(t != IGNORE_INDEX for t in row_out)  # target tokens + EOS
        assert row_out[n - 1] == EOS and row_in[1:n] == row_out[: n - 1]  # tgt_out = tgt_in shifted left
        assert all(t == PAD for t in row_in[n:]) and all(t == IGNORE_INDEX for t in row_out[n:])
    references = dm.detokenize(tgt_out.clamp(min=PAD))  # the targets decode back to the raw references
    assert references == batch["ref"] == dm.pairs["val"][1][:8]


def test_long_sentences_are_truncated(tokenizer_dir):
    data = TranslationDataModule(**{**SMALL, "max_length": 6})
    data.setup("validate")
    batch = next(iter(data.val_dataloader()))
    assert batch["src"].shape[1] == 6 and batch["tgt_in"].shape[1] == batch["tgt_out"].shape[1] == 6
    assert data.max_seq_len == 6


def test_missing_file_and_unreachable_hub_are_one_line_errors(tmp_path, monkeypatch):
    with pytest.raises(ConfigError) as error:
        TranslationDataModule(data_dir=str(tmp_path))
    message = str(error.value)
    assert "\n" not in message and str(tmp_path / "multi30k" / "raw" / "train.en") in message
    assert "--data.data_dir must hold multi30k/raw/" in message

    import datasets

    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach the Hugging Face Hub\nsecond line")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(ConfigError) as error:
        TranslationDataModule(hub_name="bentrevett/multi30k")
    message = str(error.value)
    assert "\n" not in message and "drop --data.hub_name and set --data.data_dir" in message
    with pytest.raises(ConfigError, match="vocab_size_limit must be >= 261"):
        TranslationDataModule.check_args(vocab_size_limit=100)


# --- decoding and BLEU -----------------------------------------------------------------------------------


def test_greedy_and_beam_return_valid_sequences_and_beam_one_is_greedy(dm):
    model = tiny_model(dm.vocab_size)
    batch = next(iter(dm.val_dataloader()))
    src, src_mask = batch["src"], batch["src_mask"]
    greedy = model.greedy(src, src_mask, max_len=12)
    beam, scores = model.beam_search(src, src_mask, beam_size=3, max_len=12)
    one, _ = model.beam_search(src, src_mask, beam_size=1, max_len=12)
    for hyps in (greedy, beam, one):
        check_hypotheses(hyps, 12)
    assert torch.equal(one[:, : greedy.shape[1]], greedy) and (one[:, greedy.shape[1] :] == PAD).all()
    assert torch.allclose(model.sequence_score(src, src_mask, beam), scores, atol=1e-4)
    assert len(dm.detokenize(beam)) == len(src)


def all_hypotheses(tokens: list[int], max_len: int) -> torch.Tensor:
    """(M, max_len) every hypothesis over `tokens`: ended by EOS within max_len (PAD after) or max_len long."""
    rows = []
    for n in range(max_len):
        for prefix in itertools.product(tokens, repeat=n):
            rows.append([*prefix, EOS] + [PAD] * (max_len - n - 1))
    return torch.tensor(rows + [list(p) for p in itertools.product(tokens, repeat=max_len)])


def test_exhaustive_beam_finds_the_best_hypothesis_and_never_loses_to_greedy():
    """Beam search is a heuristic: greedy's path can be pruned, so "beam >= greedy" holds in general only
    when nothing is pruned. Vocabulary 7 leaves 3 generatable tokens (5, 6, EOS); within 4 steps at most 8
    prefixes are live and 24 extensions ranked, so beam_size 24 prunes nothing and must return the best
    of all 31 hypotheses (brute force), which is at least greedy's score."""
    candidates = all_hypotheses([5, 6], 4)  # (31, 4)
    better = 0
    for seed in range(4):
        model = tiny_model(7, encoder="learned", decoder="rope", seed=seed)
        src = torch.randint(5, 7, (8, 5), generator=torch.Generator().manual_seed(seed))
        src_mask = torch.ones_like(src, dtype=torch.bool)
        greedy = model.greedy(src, src_mask, max_len=4)
        beam, scores = model.beam_search(src, src_mask, beam_size=24, max_len=4)
        greedy_scores = model.sequence_score(src, src_mask, greedy)
        assert (scores >= greedy_scores - 1e-5).all()
        assert torch.allclose(model.sequence_score(src, src_mask, beam), scores, atol=1e-5)
        for i in range(len(src)):
            every = model.sequence_score(src[i : i + 1].expand(31, -1), src_mask[i : i + 1].expand(31, -1), candidates)
            assert scores[i] == pytest.approx(every.max().item(), abs=1e-5)
        better += int((scores > greedy_scores + 1e-5).sum())
    assert better > 0  # the check has teeth: on some sources beam search beats greedy


def test_bleu_is_100_for_perfect_and_0_for_disjoint_predictions(dm):
    model = tiny_model(dm.vocab_size)
    refs = dm.pairs["val"][1][:8]
    perfect = dm.detokenize(next(iter(dm.val_dataloader()))["tgt_out"].clamp(min=PAD))
    model.bleu["val"].update(perfect, [[r] for r in refs])
    assert 100 * model.bleu["val"].compute().item() == pytest.approx(100.0)
    model.bleu["val"].reset()
    model.bleu["val"].update(["xyz qqq www vvv"] * 8, [[r] for r in refs])
    assert model.bleu["val"].compute().item() == 0.0


# --- model ------------------------------------------------------------------------------------------------

BIDIRECTIONAL = [name for name, cls in ENCODINGS.items() if not cls.causal_only]


@pytest.mark.parametrize("encoding", BIDIRECTIONAL)
def test_source_padding_changes_nothing_at_real_positions(encoding):
    model = tiny_model(40, encoder=encoding, decoder="rope")
    src = torch.randint(5, 40, (3, 7), generator=torch.Generator().manual_seed(0))
    lengths = [7, 4, 2]
    src_mask = torch.arange(7)[None] < torch.tensor(lengths)[:, None]  # (B, S)
    src = src.masked_fill(~src_mask, PAD)
    tgt_in = torch.tensor([[BOS, 9, 10, 11]]).expand(3, -1)
    memory = model.encode(src, src_mask)  # (B, S, C)
    logits = model(src, src_mask, tgt_in)  # (B, T, V)
    for i, n in enumerate(lengths):
        alone = model.encode(src[i : i + 1, :n], src_mask[i : i + 1, :n])
        assert torch.allclose(memory[i, :n], alone[0], atol=1e-5)
        assert torch.allclose(logits[i], model(src[i : i + 1, :n], src_mask[i : i + 1, :n], tgt_in[:1])[0], atol=1e-5)


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_every_encoding_decodes(encoding):
    model = tiny_model(40, encoder="none", decoder=encoding)
    src = torch.randint(5, 40, (2, 6), generator=torch.Generator().manual_seed(0))
    src_mask = torch.ones_like(src, dtype=torch.bool)
    logits = model(src, src_mask, torch.tensor([[BOS, 7, 8], [BOS, 9, 10]]))
    assert logits.shape == (2, 3, 40) and torch.isfinite(logits).all()
    check_hypotheses(model.greedy(src, src_mask, max_len=5), 5)
    beam, scores = model.beam_search(src, src_mask, beam_size=2, max_len=5)
    check_hypotheses(beam, 5)
    assert torch.isfinite(scores).all()


def test_cross_attention_has_no_positional_term_and_embeddings_are_tied():
    """Cross-attention ignores where a source token sits (permuting the encoder output permutes nothing in the
    result); one (vocabulary, width) matrix embeds source and target and projects the output; beam 5 by default;
    TUPE's [CLS] untying stays off on both sides (position 0 is an ordinary token), forcing it is an error."""
    from lightning_modules.translation import CrossAttention

    torch.manual_seed(0)
    cross = CrossAttention(dim=16, num_heads=4, dropout=0.0).eval()
    x, memory = torch.randn(2, 3, 16), torch.randn(2, 5, 16)
    allowed = torch.tensor([[True] * 5, [True, True, True, False, False]])[:, None, None, :]
    permutation = torch.tensor([4, 2, 0, 3, 1])
    with torch.no_grad():
        torch.testing.assert_close(cross(x, memory, allowed),
                                   cross(x, memory[:, permutation], allowed[..., permutation]))  # fmt: skip
    model = tiny_model(40)
    embeddings = [key for key, p in model.named_parameters() if p.shape == (40, TINY_ARCH["dim"])]
    assert embeddings == ["encoder.token_emb.weight"] and model.hparams.beam_size == 5
    hidden = torch.randn(2, 3, TINY_ARCH["dim"])
    torch.testing.assert_close(model.logits(hidden), hidden @ model.token_emb.weight.T)
    tupe = tiny_model(40, encoder="tupe_a", decoder="tupe_r")
    assert tupe.encoder.encoding.untie_cls is False and tupe.decoder.encoding.untie_cls is False
    with pytest.raises(ConfigError, match="untie_cls needs \\[CLS\\] at position 0"):
        TranslationModel(ArchConfig("tupe_a", encoding_options={"untie_cls": True}, vocab_size=40, **TINY_ARCH))


def test_xpos_encoder_is_a_one_line_error(capsys):
    with pytest.raises(ConfigError, match="causal-only and cannot encode the"):
        tiny_model(40, encoder="xpos")
    with pytest.raises(SystemExit) as exit_info:
        cli_main([
            "fit", "--config=configs/translation_multi30k.yaml", "--model.arch.encoding=xpos",
            *[f"--data.{k}={v}" for k, v in SMALL.items()],
        ])  # fmt: skip
    assert exit_info.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[-1].startswith("error: encoding 'xpos' is causal-only") and "--model.decoder_encoding" in lines[-1]


def test_test_step_logs_beam_and_greedy_bleu(dm):
    model = tiny_model(dm.vocab_size, max_decode_len=6)
    trainer = pl.Trainer(accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, limit_test_batches=1)  # fmt: skip
    (result,) = trainer.test(model, datamodule=dm, verbose=False)
    for key in ("test/loss", "test/ppl", "test/bleu", "test/bleu_greedy"):
        assert key in result and result[key] == result[key], key  # logged, not NaN
    assert 0.0 <= result["test/bleu"] <= 100.0


@pytest.mark.slow  # trains a model or starts a process
@pytest.mark.parametrize("encoder, decoder", [("learned", "rope"), ("t5_bias", "alibi"), ("none", "xpos")])
def test_few_step_fit_with_independent_encodings(encoder, decoder, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    cli_main([
        "fit", "--config=configs/translation_multi30k.yaml", f"--model.arch.encoding={encoder}",
        f"--model.decoder_encoding={decoder}", "--model.arch.dim=32", "--model.arch.depth=1", "--model.decoder_depth=1",
        "--model.val_bleu_batches=1", "--model.max_decode_len=8", "--model.warmup_steps=0",
        *[f"--data.{k}={v}" for k, v in SMALL.items()], "--trainer.max_steps=3", "--trainer.val_check_interval=3",
        "--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false", f"--run.out_dir={tmp_path}",
    ])  # fmt: skip
    (path,) = Path(tmp_path, "runs").glob("*/record.json")
    record = json.loads(path.read_text())
    assert record["status"] == "finished" and record["task"] == "multi30k"
    assert (
        record["name"] == f"multi30k-{encoder}+{decoder}-dim=32-depth=1-s0"
        and record["encoding"] == f"{encoder}+{decoder}"
    )
    final = record["final"]
    for name in ("train/loss", "val/loss", "val/ppl", "val/bleu"):
        assert torch.isfinite(torch.tensor(final[name])), name
    assert 0.0 <= final["val/bleu"] <= 100.0 and final["val/ppl"] == pytest.approx(
        torch.tensor(final["val/loss"]).exp()
    )
