"""Every registered synthetic task has a category (datamodules/tasks: `task_category`), from the allowed set, for the
per-category mean ranks of `compare` (issue 49.3)."""

import pytest

from datamodules.tasks import CATEGORIES, TASK_CATEGORIES, TASKS, task_category
from pe_core.errors import ConfigError


@pytest.mark.parametrize("name", sorted(TASKS))
def test_every_registered_task_has_a_category_from_the_allowed_set(name):
    assert task_category(name) in CATEGORIES


def test_categories_follow_the_papers_groups_and_name_only_registered_tasks():
    assert set(TASK_CATEGORIES) <= set(TASKS)
    by = {name: task_category(name) for name in TASKS}
    assert {by[t] for t in ("even_pairs", "parity_check", "flip_flop", "word_problem_s5")} == {"regular"}
    assert {by[t] for t in ("stack_manipulation", "reverse_string", "reverse")} == {"context_free"}
    assert {by[t] for t in ("duplicate_string", "bucket_sort", "copy")} == {"context_sensitive"}
    assert {by[t] for t in ("addition", "summation", "addition_zhou")} == {"arithmetic"}
    assert {by[t] for t in ("lookup", "passkey", "mqar")} == {"retrieval"}
    assert set(by.values()) == set(CATEGORIES)  # no category is empty


def test_an_unknown_task_or_one_without_a_category_is_one_line(monkeypatch):
    with pytest.raises(ConfigError, match="unknown task 'nope'; choose one of: copy"):
        task_category("nope")
    monkeypatch.setitem(TASKS, "toy", TASKS["copy"]._replace(family="toy_family"))
    with pytest.raises(ConfigError, match="task 'toy' .family 'toy_family'. has no category; name one in "):
        task_category("toy")
