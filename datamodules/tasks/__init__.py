"""The synthetic task registry: adding a task is one generator, its reference, and one line in `TASKS`.

A generator is `fn(rng, n, num_symbols, train_max_len, **options) -> (prompt, answer)` (token id lists, see
tokens.py; the prompt and answer lengths depend on n and the options only). Its reference recomputes the
answer from the prompt: `reference(prompt, n, num_symbols, train_max_len, **options) -> answer`; the shared
test (tests/data/test_tasks.py) checks every entry against it. A task's options are its generator's keyword-only
arguments; `eval_options` override them in the validation and test splits (flip-flop's sparse and dense
evaluations, the addition tasks' offsets drawn at training time only).

A generator may return a third element, a dict of extras: "positions", the example's own position ids for every
token of `prompt SEP answer` (of the prompt alone for a prompt with SLOTs; the model then uses them instead of
0..L-1, see positions.py), and "depth", where in the prompt the answer hides (in [0, 1], logged in bins by tasks
registered with `depth=True`). A task whose prompt length varies with the draw, or with tokens or positions beyond
the shared vocabulary, registers `limits(n, num_symbols, train_max_len, **options) -> dict` with any of "prompt",
"answer" (longest lengths), "vocab" (token ids below it) and "max_position" (largest position id).
"""

import inspect
from collections.abc import Callable
from typing import NamedTuple

from datamodules.tasks import (
    basic,
    chomsky_context_free,
    chomsky_context_sensitive,
    chomsky_regular,
    clrs_text,
    flip_flop,
    pcfg,
    ruler,
    scan,
)
from datamodules.tasks import kazemnejad as K
from datamodules.tasks import state_tracking as ST
from datamodules.tasks.arithmetic import addition_zhou, addition_zhou_limits, addition_zhou_reference
from datamodules.tasks.retrieval import mqar, mqar_reference, passkey, passkey_reference
from pe_core.errors import ConfigError, wrong_type


class Task(NamedTuple):
    """A registered task: generator, reference, family (for the sweeps), option overrides at evaluation, size
    limits (None: fixed by n, in the shared vocabulary), whether its examples carry a depth."""

    generate: Callable
    reference: Callable
    family: str
    eval_options: dict = {}
    limits: Callable | None = None
    depth: bool = False


def _entry(module, name: str, family: str, limits: bool = False, **eval_options) -> Task:
    """The task `name` of `module`, with its reference (and its `limits` function where `limits`)."""
    bounds = getattr(module, f"{name}_limits") if limits else None
    return Task(getattr(module, name), getattr(module, f"{name}_reference"), family, eval_options, bounds)


R, CF, CS = chomsky_regular, chomsky_context_free, chomsky_context_sensitive
OFFSETS = {"random_offset": False}  # position offsets are drawn at training time only

TASKS: dict[str, Task] = {
    "copy": Task(basic.copy_task, basic.copy_reference, "basic"),
    "reverse": Task(basic.reverse_task, basic.reverse_reference, "basic"),
    "sort": Task(basic.sort_task, basic.sort_reference, "basic"),
    "addition": Task(basic.addition_task, basic.addition_reference, "basic", OFFSETS, basic.addition_limits),
    "lookup": Task(basic.lookup_task, basic.lookup_reference, "basic"),
    # Kazemnejad et al. 2023's other tasks
    "polynomial_evaluation": _entry(K, "polynomial_evaluation", "basic"),
    "summation": _entry(K, "summation", "basic"),
    "lego": Task(K.lego, K.lego_reference, "basic", limits=K.lego_limits),
    "scan": Task(scan.scan_task, scan.scan_reference, "compositional", limits=scan.scan_limits),
    "pcfg": Task(pcfg.pcfg_task, pcfg.pcfg_reference, "compositional", limits=pcfg.pcfg_limits),
    # Chomsky hierarchy (Delétang et al. 2023)
    "even_pairs": _entry(R, "even_pairs", "regular"),
    "modular_arithmetic": _entry(R, "modular_arithmetic", "regular"),
    "parity_check": _entry(R, "parity_check", "regular"),
    "cycle_navigation": _entry(R, "cycle_navigation", "regular"),
    "stack_manipulation": _entry(CF, "stack_manipulation", "context_free"),
    "reverse_string": _entry(CF, "reverse_string", "context_free"),
    "modular_arithmetic_brackets": _entry(CF, "modular_arithmetic_brackets", "context_free"),
    "solve_equation": _entry(CF, "solve_equation", "context_free"),
    "duplicate_string": _entry(CS, "duplicate_string", "context_sensitive"),
    "missing_duplicate_string": _entry(CS, "missing_duplicate_string", "context_sensitive"),
    "odds_first": _entry(CS, "odds_first", "context_sensitive"),
    "binary_addition": _entry(CS, "binary_addition", "context_sensitive"),
    "binary_multiplication": _entry(CS, "binary_multiplication", "context_sensitive"),
    "compute_sqrt": _entry(CS, "compute_sqrt", "context_sensitive"),
    "bucket_sort": _entry(CS, "bucket_sort", "context_sensitive"),
    # flip-flop language modelling (Liu et al. 2023)
    "flip_flop": _entry(flip_flop, "flip_flop", "flip_flop"),
    "flip_flop_sparse": Task(flip_flop.flip_flop, flip_flop.flip_flop_reference, "flip_flop", {"p_ignore": 0.98}),
    "flip_flop_dense": Task(flip_flop.flip_flop, flip_flop.flip_flop_reference, "flip_flop", {"p_ignore": 0.1}),
    # length-generalisation records of 2024 (Zhou et al.; McLeish et al.; Cho et al.)
    "addition_zhou": Task(addition_zhou, addition_zhou_reference, "arithmetic", OFFSETS, addition_zhou_limits),
    # retrieval proxies of needle-in-a-haystack / RULER
    "passkey": Task(passkey, passkey_reference, "retrieval", depth=True),
    "mqar": Task(mqar, mqar_reference, "retrieval"),
    "niah_multikey": Task(ruler.niah_multikey, ruler.niah_multikey_reference, "retrieval", depth=True),
    "variable_tracking": Task(ruler.variable_tracking, ruler.variable_tracking_reference, "retrieval", depth=True),
    "common_words": _entry(ruler, "common_words", "retrieval"),
    # state tracking (Merrill et al. 2024): the S5 / A5 word problems
    "word_problem_s5": _entry(ST, "word_problem_s5", "state_tracking", limits=True),
    "word_problem_a5": _entry(ST, "word_problem_a5", "state_tracking", limits=True),
    # CLRS-Text (Markeeva et al. 2024): algorithm traces; length = array size / nodes
    "clrs_insertion_sort": _entry(clrs_text, "clrs_insertion_sort", "clrs_text", limits=True),
    "clrs_bubble_sort": _entry(clrs_text, "clrs_bubble_sort", "clrs_text", limits=True),
    "clrs_bfs": _entry(clrs_text, "clrs_bfs", "clrs_text", limits=True),
    "clrs_dfs": _entry(clrs_text, "clrs_dfs", "clrs_text", limits=True),
}

CHOMSKY_FAMILIES = ("regular", "context_free", "context_sensitive")

# Each task's category in the per-category mean ranks of `compare` (the atlas): Delétang et al. 2023's Chomsky class of
# the language {input # output} for their tasks and for the tasks that are the same transduction (flip-flop languages
# and the word problems of finite groups are regular, as cycle_navigation, the word problem of Z5); Kazemnejad et al.
# 2023's groups for the others: arithmetic (with Zhou et al.'s addition), retrieval and variable tracing (RULER's
# needles), compositional (SCAN, PCFG SET), and the CLRS-Text algorithm traces as algorithmic. A task's family gives
# its category; TASK_CATEGORIES names it for the tasks of the mixed "basic" family.
CATEGORIES = ("regular", "context_free", "context_sensitive", "arithmetic", "retrieval", "compositional", "algorithmic")
FAMILY_CATEGORIES = {
    **{family: family for family in (*CHOMSKY_FAMILIES, "arithmetic", "retrieval", "compositional")},
    "flip_flop": "regular",
    "state_tracking": "regular",
    "clrs_text": "algorithmic",
}
TASK_CATEGORIES = {
    "copy": "context_sensitive",  # the copy language {w#w}, as duplicate_string
    "reverse": "context_free",  # {w#w^R}, as reverse_string
    "sort": "context_sensitive",  # as bucket_sort
    "addition": "arithmetic",
    "polynomial_evaluation": "arithmetic",
    "summation": "arithmetic",
    "lookup": "retrieval",
    "lego": "retrieval",  # resolving a chain of assignments, as RULER's variable_tracking
}


def task_category(name: str) -> str:
    """The category of task `name` (by its family, or TASK_CATEGORIES): how `compare` groups the tasks' columns."""
    family = get_task(name).family
    category = TASK_CATEGORIES.get(name, FAMILY_CATEGORIES.get(family))
    if category is None:
        raise ConfigError(f"task {name!r} (family {family!r}) has no category; name one in TASK_CATEGORIES: "
                          f"{', '.join(CATEGORIES)}")  # fmt: skip
    return category


def get_task(name: str) -> Task:
    if name not in TASKS:
        raise ConfigError(f"unknown task '{name}'; choose one of: {', '.join(TASKS)}")
    return TASKS[name]


def task_options(name: str) -> list[str]:
    """The option names of task `name` (its generator's keyword-only arguments)."""
    params = inspect.signature(get_task(name).generate).parameters.values()
    return [p.name for p in params if p.kind == p.KEYWORD_ONLY]


def check_task(name: str, options: dict | None = None) -> None:
    """One-line ConfigError for an unknown task or option, or an option value of the wrong type (ranges are
    checked by the generator itself)."""
    get_task(name)
    unknown = sorted(set(options or {}) - set(task_options(name)))
    if unknown:
        valid = ", ".join(task_options(name)) or "none"
        raise ConfigError(f"task {name!r} has no option {unknown[0]!r}; its options: {valid}")
    params = inspect.signature(get_task(name).generate).parameters
    for key, value in (options or {}).items():
        problem = wrong_type(value, params[key].annotation)
        if problem:
            raise ConfigError(f"task {name!r} option {key!r} {problem}, got {value!r}")


def unpack(result: tuple) -> tuple[list[int], list[int], dict]:
    """A generator's (prompt, answer) or (prompt, answer, extras) -> (prompt, answer, extras)."""
    return (*result, {}) if len(result) == 2 else result


def limits(name: str, n: int, num_symbols: int, train_max_len: int, options: dict) -> dict:
    """The task's declared limits at length n with these options ({} when it declares none)."""
    fn = get_task(name).limits
    return fn(n, num_symbols, train_max_len, **options) if fn else {}


def split_options(name: str, options: dict | None, train: bool) -> dict:
    """The options the generator gets in the training split (`train`) or the evaluation splits."""
    options = dict(options or {})
    return options if train else {**options, **get_task(name).eval_options}
