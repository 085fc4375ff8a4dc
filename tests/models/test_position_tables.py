"""Pre-trained position tables (PE-Study): tiny random GPT-2 / BERT / RoBERTa models saved by transformers are
read exactly (RoBERTa without its padding offset), probed, and transferred into `learned`; .npy / .pt tables;
an unreachable hub name is one line.

Claims of docs/probes.md and docs/encodings.md covered here:
- "cli.py probe --hf-model path/to/bert-base-uncased ... # a pre-trained table"; "--hf-model takes a folder saved by
  transformers (save_pretrained) or a hub name (online only; an unreachable name is one line asking for a local
  folder, exit 2)": test_probe_reads_hf_models_and_tables, test_unreachable_hub_and_bad_sources_are_one_line
- "reads, through transformers (safetensors, or .bin with weights_only), GPT-2's wpe, BERT's
  embeddings.position_embeddings or RoBERTa's, without RoBERTa's first padding_idx + 1 rows":
  test_the_exact_table_is_read, test_bin_weights_are_read_and_a_crafted_pt_table_is_refused,
  test_unsupported_family_is_named
- "--table reads a .npy array or a .pt file holding one tensor": test_probe_reads_hf_models_and_tables,
  test_bin_weights_are_read_and_a_crafted_pt_table_is_refused
- "The same sources feed learned's init_from (PE-Study's transfer setting)"; learned "init_from a .pt/.npy file or a
  Hugging Face GPT-2 / BERT / RoBERTa model folder": test_learned_init_from_a_hf_model_folder
"""

import numpy as np
import pytest
import torch
from transformers import (
    BertConfig,
    BertForMaskedLM,
    GPT2Config,
    GPT2LMHeadModel,
    RobertaConfig,
    RobertaForMaskedLM,
)

from lightning_modules.encodings import build_encoding
from lightning_modules.encodings.learned import transfer_table
from lightning_modules.position_tables import HF_TABLES, hf_position_table
from pe_core.errors import ConfigError
from pe_sweeps.cli import cli_main
from pe_sweeps.probes import TABLE, probe_main

WIDTH, ROWS = 24, 40
SMALL = ["--pairs", "64", "--seeds", "2"]


def tiny_model(family: str):
    """(model, its full position table as stored, the rows a probe must see)."""
    torch.manual_seed(0)
    sizes = {"hidden_size": WIDTH, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 32}
    if family == "gpt2":
        model = GPT2LMHeadModel(GPT2Config(n_embd=WIDTH, n_layer=1, n_head=2, n_positions=ROWS, vocab_size=60))
        stored = model.transformer.wpe.weight
        return model, stored, stored
    if family == "bert":
        model = BertForMaskedLM(BertConfig(**sizes, max_position_embeddings=ROWS, vocab_size=60))
        stored = model.bert.embeddings.position_embeddings.weight
        return model, stored, stored
    padding = 1  # RoBERTa's pad id: positions are numbered from padding + 1 = 2
    model = RobertaForMaskedLM(RobertaConfig(**sizes, max_position_embeddings=ROWS + 2, vocab_size=60,
                                             pad_token_id=padding))  # fmt: skip
    stored = model.roberta.embeddings.position_embeddings.weight
    return model, stored, stored[padding + 1 :]


@pytest.fixture(params=list(HF_TABLES))
def saved_model(request, tmp_path):
    model, stored, expected = tiny_model(request.param)
    folder = tmp_path / request.param
    model.save_pretrained(folder)
    assert (folder / "model.safetensors").is_file()
    return request.param, folder, stored.detach().clone(), expected.detach().clone()


def test_the_exact_table_is_read(saved_model):
    family, folder, stored, expected = saved_model
    table = hf_position_table(str(folder))
    assert table.shape == (ROWS, WIDTH) and torch.equal(table, expected)
    if family == "roberta":
        assert stored.shape[0] == ROWS + 2 and torch.equal(table[0], stored[2])


def test_probe_reads_hf_models_and_tables(saved_model, tmp_path):
    family, folder, _, expected = saved_model
    result = probe_main(["--hf-model", str(folder), *SMALL, "--report", str(tmp_path / "report")])
    assert result.source == TABLE and (result.positions, result.width) == (ROWS, WIDTH)
    assert result.encoding == family and (tmp_path / "report" / "cosine.png").is_file()
    np.save(tmp_path / "table.npy", expected.numpy())
    torch.save(expected, tmp_path / "table.pt")
    for file in ("table.npy", "table.pt"):
        other = probe_main(["--table", str(tmp_path / file), *SMALL])
        assert other.absolute_mae == result.absolute_mae and other.relative_errors == result.relative_errors
    short = probe_main(["--hf-model", str(folder), "--max-length", "20", *SMALL])
    assert short.positions == 20


def test_learned_init_from_a_hf_model_folder(saved_model):
    _, folder, _, expected = saved_model
    encoding = build_encoding("learned", dim=16, num_heads=2, max_length=32, causal=False, init_from=str(folder))
    torch.testing.assert_close(encoding.weight.detach(), transfer_table(expected, 32, 16, "first", 1, None))


def test_unreachable_hub_and_bad_sources_are_one_line(monkeypatch, tmp_path, capsys):
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(SystemExit) as exit_info:
        cli_main(["probe", "--hf-model", "no-such-org/no-such-model"])
    assert exit_info.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: --hf-model: cannot load 'no-such-org/no-such-model' from the Hugging Face hub")
    assert "pass a local model folder" in line
    (tmp_path / "t.npy").write_bytes(b"not numpy")
    for args, message in [
        (["--table", str(tmp_path / "missing.npy")], "--table: no file"),
        (["--table", str(tmp_path / "t.npy")], "--table: cannot read"),
        (["--hf-model", str(tmp_path), "--table", "x.npy"], "exactly one of"),
    ]:
        with pytest.raises(ConfigError, match=message) as error:
            probe_main(args)
        assert "\n" not in str(error.value)


class _Evil:
    def __reduce__(self):
        import os

        return (os.system, (f"touch {os.environ['PE_EVIL_MARKER']}",))


def test_bin_weights_are_read_and_a_crafted_pt_table_is_refused(tmp_path, monkeypatch):
    """A model folder saved with `.bin` weights (no safetensors) reads the same table; a `.pt` table holding a
    pickle that would run code is refused with one line (weights_only=True) and the code never runs."""
    model, _, expected = tiny_model("gpt2")
    model.save_pretrained(tmp_path / "bin")  # transformers 5 writes safetensors only: rewrite its weights as .bin
    (tmp_path / "bin" / "model.safetensors").unlink()
    torch.save(model.state_dict(), tmp_path / "bin" / "pytorch_model.bin")
    assert torch.equal(hf_position_table(str(tmp_path / "bin")), expected.detach())
    marker = tmp_path / "pwned"
    monkeypatch.setenv("PE_EVIL_MARKER", str(marker))
    torch.save({"table": _Evil()}, tmp_path / "evil.pt")
    with pytest.raises(ConfigError, match="--table: cannot read") as error:
        probe_main(["--table", str(tmp_path / "evil.pt"), *SMALL])
    assert "\n" not in str(error.value) and not marker.exists()


def test_unsupported_family_is_named(tmp_path):
    from transformers import DistilBertConfig, DistilBertModel

    DistilBertModel(DistilBertConfig(dim=16, n_layers=1, n_heads=2, hidden_dim=32, vocab_size=60)).save_pretrained(
        tmp_path
    )
    with pytest.raises(ConfigError, match="is a 'distilbert' model; supported: gpt2, bert, roberta"):
        hf_position_table(str(tmp_path))
