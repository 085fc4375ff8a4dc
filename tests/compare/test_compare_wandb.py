"""`cli.py compare --wandb ENTITY/PROJECT` when the W&B API cannot be read (issue 29, point 8): one line saying
what went wrong (no or rejected API key, W&B unreachable, a malformed path), never the advice to set
WANDB_MODE=offline, which has nothing to do with reading runs.

Claim of docs/compare.md covered here: "a malformed path, no API key, a key W&B rejects or no network is one line
saying which":
test_wandb_read_errors_say_what_went_wrong
"""

import pytest

from pe_sweeps import cli


@pytest.mark.parametrize(
    "error, expected",
    [
        ("UsageError", "no W&B API key: set WANDB_API_KEY or run `wandb login`"),
        ("AuthenticationError", "W&B rejected the API key: check WANDB_API_KEY or run `wandb login`"),
        ("CommError", "could not reach W&B: check the network"),
    ],
)
def test_wandb_read_errors_say_what_went_wrong(monkeypatch, capsys, error, expected):
    import wandb

    def failing_api(*args, **kwargs):
        raise getattr(wandb.errors, error)("the service said no")

    monkeypatch.setattr(wandb, "Api", failing_api)
    with pytest.raises(SystemExit) as exit_info:
        cli.cli_main(["compare", "--wandb=me/pe-sweeps"])
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and len(err.splitlines()) == 1, err
    assert "compare --wandb 'me/pe-sweeps': " in err and expected in err and "the service said no" in err
    assert "WANDB_MODE" not in err and "start the run" not in err


def test_wandb_path_must_be_entity_slash_project(capsys):
    with pytest.raises(SystemExit):
        cli.cli_main(["compare", "--wandb=pe-sweeps"])
    err = capsys.readouterr().err.strip()
    assert err == "error: --wandb 'pe-sweeps': expected ENTITY/PROJECT (e.g. my-team/pe-sweeps)"
