"""Polynomial evaluation, summation and LEGO as Kazemnejad et al. 2023 ("The Impact of Positional Encoding on
Length Generalization in Transformers", NeurIPS 2023) generate them (McGill-NLP/length-generalization,
scripts/dataset_builders/make_{poly,sum,lego}_dataset.py and the s2s_* instance processors), written in tokens.

Their prompts are English text read by T5's tokenizer ("Evaluate at x = -2 in 3 * x ** 2 + ... ?", "Compute: 3 + 1
+ ... .", "If a = -1, b = - a, .... Then, what is the value of b?") and the answer is "The answer is 7."; here the
same content is written with one token a number, sign or variable and the fixed words dropped (deviation: no
scratchpad and no filler words; the answer is the one answer token). The length n is theirs: terms, numbers,
variables.
"""

from math import ceil

from datamodules.tasks.tokens import PLUS, QUERY, SYMBOL0, need_range, need_symbols, symbols, tokens, vocab_size
from pe_core.errors import ConfigError

MINUS = 10  # the minus sign's symbol, after the digits 0-9


def _signed(v: int) -> list[int]:
    """A signed integer as its sign (PLUS or the minus symbol) and its magnitude (one digit symbol)."""
    return [PLUS if v >= 0 else SYMBOL0 + MINUS, SYMBOL0 + abs(v)]


def _unsigned(sign: int, magnitude: int) -> int:
    return (1 if sign == PLUS else -1) * (magnitude - SYMBOL0)


def _check_modulus(task: str, modulus: int, num_symbols: int, needed: int, why: str) -> None:
    need_range(task, "modulus", modulus, 2, 10)  # the answer is one digit
    need_symbols(task, needed, num_symbols, why)


def polynomial_evaluation(rng, n, num_symbols, train_max_len, *, modulus: int = 10):
    """prompt = x QUERY t_1 ... t_n, answer = [sum_i c_i x^d_i mod modulus] (Python's mod: non-negative).

    As make_poly_dataset.py: coefficients c uniform in [-3, 3], degrees d in [0, 3], x in [-2, 2]; n terms;
    their s2s_poly config takes the value mod 10. x and each c are written sign (PLUS or minus) then magnitude,
    a term as c's two tokens then d: 3 + 3n prompt tokens. Symbols: digits 0-9, then the minus sign.
    """
    _check_modulus("polynomial_evaluation", modulus, num_symbols, 11, "digits 0-9 and a minus sign")
    coeffs = rng.integers(-3, 4, size=n).tolist()
    degrees = rng.integers(0, 4, size=n).tolist()
    x = int(rng.integers(-2, 3))
    value = sum(c * x**d for c, d in zip(coeffs, degrees, strict=True))
    terms = [t for c, d in zip(coeffs, degrees, strict=True) for t in (*_signed(c), SYMBOL0 + d)]
    return _signed(x) + [QUERY] + terms, tokens([value % modulus])


def polynomial_evaluation_reference(prompt, n, num_symbols, train_max_len, *, modulus: int = 10):
    x = _unsigned(prompt[0], prompt[1])
    by_degree = [0, 0, 0, 0]  # collect the coefficients per degree, then Horner's rule
    for i in range(3, len(prompt), 3):
        by_degree[prompt[i + 2] - SYMBOL0] += _unsigned(prompt[i], prompt[i + 1])
    value = 0
    for c in reversed(by_degree):
        value = value * x + c
    return tokens([value % modulus])


def summation(rng, n, num_symbols, train_max_len, *, modulus: int = 10):
    """prompt = v_1 PLUS v_2 ... PLUS v_n, answer = [sum mod modulus]: as make_sum_dataset.py (values uniform in
    [1, 9]) and their s2s_sum config (mod 10). 2n - 1 prompt tokens."""
    _check_modulus("summation", modulus, num_symbols, 10, "digits 0-9")
    values = rng.integers(1, 10, size=n).tolist()
    prompt = [t for v in values for t in (PLUS, SYMBOL0 + v)][1:]
    return prompt, tokens([sum(values) % modulus])


def summation_reference(prompt, n, num_symbols, train_max_len, *, modulus: int = 10):
    return tokens([sum(symbols(t for t in prompt if t != PLUS)) % modulus])


NEG, POS, ONE = 0, 1, 2  # lego's symbols: the signs - and + (also the answers -1 and +1) and the constant 1


def lego(rng, n, num_symbols, train_max_len, *, variables: int = 128, permute_clauses: bool = False):
    """prompt = n clauses of three tokens, then QUERY q; answer = [the sign of q's value].

    As make_lego_dataset.py (after Zhang et al. 2022, yizhangzzz/transformers-lego): n distinct variables, values
    uniform in {-1, +1}; the chain's first clause is `a = +1` / `a = -1` (tokens a, sign, ONE), every next one
    `b = + a` or `b = - a` (b, sign, a) as its value equals the previous one's or not; the clauses in chain order
    (`permute_clauses: true`: shuffled, their option); the query is the chain's i-th variable with i uniform in
    [ceil(n / 2), n - 1] (theirs writes one example per such i; at n = 1 the only variable, where theirs has none).
    Deviation: variables are `variables` tokens after the shared vocabulary (default 128), theirs the 26 letters,
    so n is at most `variables`, not 26.
    """
    need_symbols("lego", 3, num_symbols, "the signs - and + and the constant 1")
    if n > variables:
        raise ConfigError(f"task 'lego' at length {n} needs variables >= {n} (distinct names), got {variables}")
    names = (vocab_size(num_symbols, train_max_len) + rng.permutation(variables)[:n]).tolist()
    values = rng.integers(0, 2, size=n).tolist()  # 0: -1, 1: +1 (as their NICE_VALUES)
    clauses = [[names[0], SYMBOL0 + values[0], SYMBOL0 + ONE]]
    for i in range(1, n):
        clauses.append([names[i], SYMBOL0 + (POS if values[i] == values[i - 1] else NEG), names[i - 1]])
    query = int(rng.integers(min(ceil(n / 2), n - 1), n))
    order = rng.permutation(n).tolist() if permute_clauses else range(n)
    prompt = [t for i in order for t in clauses[i]] + [QUERY, names[query]]
    return prompt, tokens([values[query]])


def lego_reference(prompt, n, num_symbols, train_max_len, **_):
    rules = {prompt[i]: (prompt[i + 1], prompt[i + 2]) for i in range(0, 3 * n, 3)}  # variable -> (sign, rhs)
    sign, var = SYMBOL0 + POS, prompt[-1]
    while var != SYMBOL0 + ONE:  # follow the rules back to the constant, multiplying the signs
        step, var = rules[var]
        sign = SYMBOL0 + (POS if sign == step else NEG)
    return [sign]


def lego_limits(n, num_symbols, train_max_len, *, variables: int = 128, permute_clauses: bool = False) -> dict:
    """The variables' tokens after the shared vocabulary (the lengths are fixed by n)."""
    return {"vocab": vocab_size(num_symbols, train_max_len) + variables}
