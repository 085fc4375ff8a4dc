"""Kazemnejad et al. 2023's tasks beyond copy/reverse/sort/addition: polynomial_evaluation, summation, lego, scan,
pcfg (the registry-wide checks of tests/data/test_tasks.py and test_synthetic.py run for them too). Here: each task's
definition on hand-worked examples, its draws' ranges, and its length bounds.

Claims of docs/tasks.md covered here:
- "polynomial_evaluation (n terms c x^d, c in [-3, 3], d in [0, 3], x in [-2, 2]; the value mod 10)":
  test_polynomial_value_mod_the_modulus, test_polynomial_draws_and_lengths
- "summation (n numbers in [1, 9]; the sum mod 10)": test_summation
- "lego (a chain of n clauses ...; the query among the chain's second half)": test_lego_resolves_the_chain,
  test_lego_chain_and_query
- "scan (SCAN's grammar, length = the action sequence's; all 20,910 commands; lengths with no command draw the
  longest below)": test_scan_commands_mean_their_actions, test_scan_grammar_and_lengths
- "pcfg (PCFG SET's ten functions, n = number of functions; their PCFG conditioned on n functions; outputs
  capped)": test_pcfg_function_composition, test_pcfg_trees_are_their_pcfg_conditioned_on_n_functions,
  test_pcfg_draws_and_bounds
"""

from math import ceil

import numpy as np
import pytest

from datamodules.tasks import TASKS, limits
from datamodules.tasks.tokens import IGNORE_INDEX, PLUS, QUERY, SYMBOL0, symbols, vocab_size
from pe_core.errors import ConfigError

S, T = 12, 8  # num_symbols, train_max_len
BASE = vocab_size(S, T)  # the first id after the shared vocabulary (lego's variables, scan's and pcfg's words)


def draw(task: str, n: int, seed: int, **options):
    return TASKS[task].generate(np.random.default_rng(seed), n, S, T, **options)


def ref(task: str, prompt: list[int], n: int, **options) -> list[int]:
    return TASKS[task].reference(prompt, n, S, T, **options)


# polynomial evaluation and summation


def signed(v: int) -> list[int]:
    return [PLUS if v >= 0 else SYMBOL0 + 10, SYMBOL0 + abs(v)]  # sign then magnitude; symbol 10 is the minus


def test_polynomial_value_mod_the_modulus():
    # at x = -2: 3 x^2 - 1 x^0 + 0 x^3 - 2 x^3 = 12 - 1 + 0 + 16 = 27
    terms = [(3, 2), (-1, 0), (0, 3), (-2, 3)]
    prompt = signed(-2) + [QUERY] + [t for c, d in terms for t in (*signed(c), SYMBOL0 + d)]
    assert symbols(ref("polynomial_evaluation", prompt, 4)) == [7]
    assert symbols(ref("polynomial_evaluation", prompt, 4, modulus=5)) == [2]
    # at x = 1: -2 - 1 - 3 - 1 - 3 - 3 = -13, and -13 mod 10 = 7 (the paper's own example)
    terms = [(-2, 2), (-1, 0), (-3, 3), (-1, 1), (-3, 0), (-3, 2)]
    prompt = signed(1) + [QUERY] + [t for c, d in terms for t in (*signed(c), SYMBOL0 + d)]
    assert symbols(ref("polynomial_evaluation", prompt, 6)) == [7]


def test_polynomial_draws_and_lengths():
    xs, coeffs, degrees = set(), set(), set()
    for seed in range(60):
        prompt, answer = draw("polynomial_evaluation", 5, seed)
        assert len(prompt) == 3 + 3 * 5 and len(answer) == 1 and prompt[2] == QUERY
        x = (-1 if prompt[0] != PLUS else 1) * (prompt[1] - SYMBOL0)
        triples = [prompt[i : i + 3] for i in range(3, len(prompt), 3)]
        cs = [(-1 if s != PLUS else 1) * (m - SYMBOL0) for s, m, _ in triples]
        ds = [d - SYMBOL0 for _, _, d in triples]
        assert symbols(answer) == [sum(c * x**d for c, d in zip(cs, ds)) % 10]
        xs.add(x), coeffs.update(cs), degrees.update(ds)
    assert xs == set(range(-2, 3)) and coeffs == set(range(-3, 4)) and degrees == set(range(4))
    with pytest.raises(ConfigError, match="needs modulus in \\[2, 10\\], got 11"):
        draw("polynomial_evaluation", 3, 0, modulus=11)
    with pytest.raises(ConfigError, match="needs num_symbols >= 11"):
        TASKS["polynomial_evaluation"].generate(np.random.default_rng(0), 3, 10, T)


def test_summation():
    values = [3, 3, 1, 8, 6, 1, 2, 1, 9, 8, 1]  # the paper's example: 43
    prompt = [t for v in values for t in (PLUS, SYMBOL0 + v)][1:]
    assert symbols(ref("summation", prompt, 11)) == [3]
    assert symbols(ref("summation", prompt, 11, modulus=7)) == [43 % 7]
    seen = set()
    for seed in range(30):
        prompt, answer = draw("summation", 7, seed)
        assert len(prompt) == 2 * 7 - 1 and prompt[1::2] == [PLUS] * 6
        numbers = symbols(prompt[0::2])
        assert symbols(answer) == [sum(numbers) % 10]
        seen.update(numbers)
    assert seen == set(range(1, 10))


# LEGO

MINUS_, PLUS_, ONE = (SYMBOL0 + k for k in range(3))  # lego's symbols: the signs and the constant 1


def test_lego_resolves_the_chain():
    """The paper's own example, clauses out of order: c = + t, r = + f, t = - q, q = -1, f = - c; c is +1."""
    c, r, t, q, f = (BASE + k for k in range(5))
    clauses = [[c, PLUS_, t], [r, PLUS_, f], [t, MINUS_, q], [q, MINUS_, ONE], [f, MINUS_, c]]
    prompt = [tok for clause in clauses for tok in clause]
    expected = {c: PLUS_, r: MINUS_, t: PLUS_, q: MINUS_, f: MINUS_}
    for var, value in expected.items():
        assert ref("lego", prompt + [QUERY, var], 5, permute_clauses=True) == [value]


def test_lego_chain_and_query():
    queried = set()
    for seed in range(80):
        prompt, answer = draw("lego", 7, seed)
        assert len(prompt) == 3 * 7 + 2 and prompt[-2] == QUERY and len(answer) == 1
        clauses = [prompt[i : i + 3] for i in range(0, 21, 3)]
        names = [cl[0] for cl in clauses]
        assert len(set(names)) == 7 and all(BASE <= v < BASE + 128 for v in names)  # distinct, from the pool
        assert clauses[0][2] == ONE and all(cl[2] == prev[0] for prev, cl in zip(clauses, clauses[1:]))  # a chain
        values = [1 if clauses[0][1] == PLUS_ else -1]  # a = +1 / -1, then b = + a / - a, ...
        for cl in clauses[1:]:
            values.append(values[-1] * (1 if cl[1] == PLUS_ else -1))
        index = names.index(prompt[-1])
        queried.add(index)
        assert answer == [PLUS_ if values[index] > 0 else MINUS_]
    assert queried == set(range(ceil(7 / 2), 7))  # the chain's second half, as the paper's generator
    assert draw("lego", 1, 0)[0][-1] == draw("lego", 1, 0)[0][0]  # one clause: its variable is asked
    constants = [draw("lego", 9, seed, permute_clauses=True)[0][2:-2:3].index(ONE) for seed in range(20)]
    assert len(set(constants)) > 3  # permute_clauses: the clause "a = +-1" anywhere
    with pytest.raises(ConfigError, match="lego.*needs variables >= 40.*got 26"):
        draw("lego", 40, 0, variables=26)
    assert limits("lego", 40, S, T, {})["vocab"] == BASE + 128


# SCAN

WORDS = "walk look run jump turn left right opposite around twice thrice and after".split()
ACTIONS = "WALK LOOK RUN JUMP LTURN RTURN".split()


def scan(command: str) -> list[str]:
    prompt = [BASE + WORDS.index(w) for w in command.split()]
    return [ACTIONS[s] for s in symbols(ref("scan", prompt, 1))]


def test_scan_commands_mean_their_actions():
    """Lake & Baroni 2018's semantics, worked by hand."""
    assert scan("walk after turn right") == ["RTURN", "WALK"]
    assert scan("jump left") == ["LTURN", "JUMP"]
    assert scan("turn around left") == ["LTURN"] * 4
    assert scan("look opposite right") == ["RTURN", "RTURN", "LOOK"]
    assert scan("run around right") == ["RTURN", "RUN"] * 4
    assert scan("walk opposite right thrice after run left") == ["LTURN", "RUN"] + ["RTURN", "RTURN", "WALK"] * 3
    # the example in Kazemnejad et al.'s code: 22 actions
    expected = ["LTURN", "LTURN", "JUMP"] * 2 + ["RTURN", "LOOK"] * 8
    assert scan("jump opposite left twice and look around right twice") == expected


def test_scan_grammar_and_lengths():
    from datamodules.tasks.scan import commands_by_length

    table = commands_by_length()
    assert sum(len(v) for v in table.values()) == 20910  # SCAN's every command, once
    # Lake & Baroni's length split: 16,990 commands of up to 22 actions, 3,920 of 24-48
    assert sum(len(v) for m, v in table.items() if m <= 22) == 16990
    gaps = [23, 29, 31, 34, 35, 37, 38, 39, 41, 42, 43, 44, 45, 46, 47]
    assert sorted(table) == [n for n in range(1, 49) if n not in gaps]
    assert max(len(words) for cmds in table.values() for words, _ in cmds) == 9
    for n, expected in [(1, 1), (7, 7), (22, 22), (23, 22), (26, 26), (47, 40), (48, 48), (97, 48)]:
        bounds = limits("scan", n, S, T, {})
        assert bounds["answer"] == expected and bounds["prompt"] == 9 and bounds["vocab"] == BASE + 13
        for seed in range(5):
            prompt, answer = draw("scan", n, seed)
            assert len(answer) == expected and 1 <= len(prompt) <= 9 and all(BASE <= t < BASE + 13 for t in prompt)
    assert {tuple(draw("scan", 1, seed)[0]) for seed in range(60)} == {
        tuple(BASE + WORDS.index(w) for w in c.split())
        for c in "walk look run jump".split() + ["turn left", "turn right"]
    }


# PCFG SET

UNARY = "copy reverse shift echo swap_first_last repeat".split()
BINARY = "append prepend remove_first remove_second".split()
FUNCS = UNARY + BINARY + [","]
END = SYMBOL0 + 8  # the terminator after the default alphabet of 8 letters


def pcfg(source: str, letters: dict, **options) -> list:
    prompt = [BASE + FUNCS.index(w) if w in FUNCS else SYMBOL0 + letters[w] for w in source.split()]
    answer = ref("pcfg", prompt, 1, **options)
    names = {v: k for k, v in letters.items()}
    return [names[s] if t != END else "END" for s, t in zip(symbols(answer), answer) if t != IGNORE_INDEX]


def test_pcfg_function_composition():
    letters = {w: i for i, w in enumerate("A B C D E F G H".split())}
    assert pcfg("repeat A B C", letters) == "A B C A B C END".split()
    assert pcfg("echo remove_first D E , F G", letters) == "F G G END".split()
    assert pcfg("append swap_first_last F G H , repeat A B", letters) == "H G F A B A B END".split()
    assert pcfg("shift A B C D", letters) == "B C D A END".split()
    assert pcfg("prepend reverse A B C , remove_second D , E", letters) == "D C B A END".split()
    # Kazemnejad et al.'s example (the letters renamed): echo append copy Q10 E4 S15 P7 , shift remove_second
    # K15 D8 M9 W5 , H12 Q5 G10 J6 J10 -> Q10 E4 S15 P7 D8 M9 W5 K15 K15
    source = "echo append copy A B C D , shift remove_second E F G H , A B C D D"
    assert pcfg(source, letters) == "A B C D F G H E E END".split()
    answer = ref("pcfg", [BASE + FUNCS.index("copy"), SYMBOL0, SYMBOL0 + 1], 1)
    assert answer == [SYMBOL0, SYMBOL0 + 1, END] + [IGNORE_INDEX] * 30  # max_output 32, then the terminator


def test_pcfg_trees_are_their_pcfg_conditioned_on_n_functions():
    """By hand from generate.py's probabilities (a function unary 3/4, an argument a function 1/4): with one
    function, unary f(S) has 3/4 * 3/4, binary f(S, S) 1/4 * 3/4 * 3/4, so P(unary) = 4/5; with two, unary trees
    weigh 3/4 * 1/4 * (9/16 + 9/64) and binary ones 2 * 1/4 * 3/4 * 1/4 * (9/16 + 9/64), so P(unary) = 2/3 and the
    two splits of the binary's one inner function are equally likely."""
    from datamodules.tasks.pcfg import root_probabilities

    assert np.allclose(root_probabilities(1), [4 / 5, 1])
    assert np.allclose(root_probabilities(2), [2 / 3, 5 / 6, 1])


def test_pcfg_draws_and_bounds():
    functions = set()
    for n in (1, 3, 9, 30):
        bounds = limits("pcfg", n, S, T, {})
        assert bounds == {"prompt": 7 * n + 5, "answer": 33, "vocab": BASE + 11}
        for seed in range(10):
            prompt, answer = draw("pcfg", n, seed)
            words = [FUNCS[t - BASE] for t in prompt if t >= BASE]
            functions.update(w for w in words if w != ",")
            assert sum(w != "," for w in words) == n and words.count(",") == sum(w in BINARY for w in words)
            assert len(prompt) <= bounds["prompt"] and len(answer) == 33 and END in answer
            assert all(SYMBOL0 <= t < END for t in answer[: answer.index(END)]) and prompt[0] >= BASE
    assert functions == set(UNARY + BINARY)
    short = draw("pcfg", 12, 1, max_output=6)[1]
    assert len(short) == 7 and END in short
    with pytest.raises(ConfigError, match="needs max_output >= 5"):
        draw("pcfg", 3, 0, max_output=4)
    with pytest.raises(ConfigError, match="needs num_symbols >= 13"):
        draw("pcfg", 3, 0, alphabet=12)
