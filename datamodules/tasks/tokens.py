"""Token ids shared by every synthetic task, and helpers to move between symbol indices and token ids.

Vocabulary: PAD=0, SEP=1, MASK=2, PLUS=3, QUERY=4, then `num_symbols` symbol tokens (SYMBOL0=5, ...), then
`train_max_len` index tokens (used by `lookup`). A task writes symbol k as token SYMBOL0 + k.
"""

from pe_core.errors import ConfigError

PAD, SEP, MASK, PLUS, QUERY = 0, 1, 2, 3, 4
SYMBOL0 = 5
IGNORE_INDEX = -100  # targets with this value carry no loss (torch cross_entropy's default ignore_index)
# In a prompt: an answer slot inside the prompt (flip-flop's read values); `format_example` fills the slots
# with the answer in order. In an answer: an output position that is not scored (after a termination token).
SLOT = -1


def vocab_size(num_symbols: int, train_max_len: int) -> int:
    """Special tokens + symbol tokens + one index token per training position."""
    return SYMBOL0 + num_symbols + train_max_len


def index_token(i: int, num_symbols: int) -> int:
    """Token id of position index i (the `lookup` query)."""
    return SYMBOL0 + num_symbols + i


def tokens(symbols) -> list[int]:
    """Symbol indices -> token ids (IGNORE_INDEX and SLOT pass through)."""
    return [s if s in (IGNORE_INDEX, SLOT) else SYMBOL0 + int(s) for s in symbols]


def symbols(token_ids) -> list[int]:
    """Token ids -> symbol indices (IGNORE_INDEX and SLOT pass through)."""
    return [t if t in (IGNORE_INDEX, SLOT) else t - SYMBOL0 for t in token_ids]


def need_symbols(task: str, needed: int, num_symbols: int, why: str) -> None:
    """One-line error when the task's alphabet does not fit in `num_symbols`."""
    if num_symbols < needed:
        raise ConfigError(f"task {task!r} needs num_symbols >= {needed} ({why}), got {num_symbols}")


def need_range(task: str, option: str, value, low, high=None) -> None:
    """One-line error when a task option is out of [low, high]."""
    if value < low or (high is not None and value > high):
        bound = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise ConfigError(f"task {task!r} needs {option} {bound}, got {value}")
