"""RULER-style retrieval (Hsieh et al. 2024, "RULER: What's the Real Context Size of Your Long-Context Language
Models?"), CPU-sized: multi-key needle-in-a-haystack, variable tracking and common-word extraction, in symbol
tokens rather than English (words, numbers and UUIDs are short symbol strings; the haystack is passkey's repeated
"sentence" of symbols 0, 1, ..., num_symbols - 1). Length n = haystack tokens (list words for common_words).

Where a needle has a depth (niah_multikey, variable_tracking) the example records it, d / n for a needle after d
haystack tokens (0 = start, 1 = just before the question), logged in bins as passkey's (`val/acc_depth_<percent>`).
"""

from math import ceil

from datamodules.tasks.tokens import PLUS, QUERY, SYMBOL0, need_range, need_symbols
from pe_core.errors import ConfigError


def _haystack(n: int, num_symbols: int) -> list[int]:
    return [SYMBOL0 + i % num_symbols for i in range(n)]


def _codes(task: str, rng, count: int, width: int, num_symbols: int, what: str) -> list[list[int]]:
    """`count` distinct strings of `width` symbols (token ids), uniform without replacement."""
    if count > num_symbols**width:
        raise ConfigError(f"task {task!r} needs num_symbols ** {width} >= {count} ({what}), got {num_symbols}")
    picks = rng.choice(num_symbols**width, size=count, replace=False)
    return [[SYMBOL0 + int(c) // num_symbols**j % num_symbols for j in range(width)] for c in picks]


def _insert(haystack: list[int], pieces: list[list[int]], at: list[int]) -> list[int]:
    """The haystack with pieces[j] inserted after at[j] of its tokens (`at` ascending)."""
    out, last = [], 0
    for piece, d in zip(pieces, at, strict=True):
        out += haystack[last:d] + piece
        last = d
    return out + haystack[last:]


def niah_multikey(rng, n, num_symbols, train_max_len, *, num_needles: int = 4, num_queries: int = 1,
                  key_length: int = 2, value_length: int = 3):  # fmt: skip
    """prompt = haystack with `num_needles` needles `PLUS key value` at uniform depths, then QUERY and
    `num_queries` of the keys; answer = the queried keys' values, in query order.

    RULER's niah_multikey_1 (one needle asked among distractor needles; `num_queries` > 1 is its
    niah_multiquery). Keys (`key_length` symbols) are distinct, values (`value_length` symbols) uniform. The
    recorded depth is the smallest among the queried needles' (the one farthest from the question: the example is
    right only if every queried value is).
    """
    need_range("niah_multikey", "num_needles", num_needles, 1)
    need_range("niah_multikey", "num_queries", num_queries, 1, num_needles)
    need_range("niah_multikey", "key_length", key_length, 1)
    need_range("niah_multikey", "value_length", value_length, 1)
    keys = _codes("niah_multikey", rng, num_needles, key_length, num_symbols, "distinct needle keys")
    values = (SYMBOL0 + rng.integers(0, num_symbols, size=(num_needles, value_length))).tolist()
    depths = sorted(rng.integers(0, n + 1, size=num_needles).tolist())
    queried = rng.choice(num_needles, size=num_queries, replace=False).tolist()
    prompt = _insert(_haystack(n, num_symbols), [[PLUS] + k + v for k, v in zip(keys, values)], depths)
    prompt += [QUERY] + [t for q in queried for t in keys[q]]
    answer = [t for q in queried for t in values[q]]
    return prompt, answer, {"depth": min(depths[q] for q in queried) / n}


def niah_multikey_reference(prompt, n, num_symbols, train_max_len, *, num_needles: int = 4, num_queries: int = 1,
                            key_length: int = 2, value_length: int = 3):  # fmt: skip
    needles = {}
    for i, t in enumerate(prompt):
        if t == PLUS:
            key = tuple(prompt[i + 1 : i + 1 + key_length])
            needles[key] = prompt[i + 1 + key_length : i + 1 + key_length + value_length]
    asked = prompt[prompt.index(QUERY) + 1 :]
    return [t for j in range(0, len(asked), key_length) for t in needles[tuple(asked[j : j + key_length])]]


def variable_tracking(rng, n, num_symbols, train_max_len, *, num_chains: int = 1, num_hops: int = 4,
                      name_length: int = 2):  # fmt: skip
    """prompt = haystack with `num_chains` chains of assignments `X1 = v`, `X2 = X1`, ..., `X(hops+1) = X(hops)`
    (each statement `PLUS lhs rhs`) inserted in order at uniform depths, chains interleaved at random, then
    QUERY v for one chain's value; answer = every variable equal to v, in assignment order.

    RULER's vt (defaults: 1 chain, 4 hops). Variable names and values are distinct `name_length`-symbol strings
    (deviation: RULER's values are 5-digit numbers, its names 5 letters). The recorded depth is that of the
    queried chain's first assignment `X1 = v`.
    """
    need_range("variable_tracking", "num_chains", num_chains, 1)
    need_range("variable_tracking", "num_hops", num_hops, 0)
    need_range("variable_tracking", "name_length", name_length, 1)
    size = num_hops + 1
    codes = _codes("variable_tracking", rng, num_chains * (size + 1), name_length, num_symbols, "distinct names")
    values, names = codes[:num_chains], [codes[num_chains + c * size : num_chains + (c + 1) * size]
                                         for c in range(num_chains)]  # fmt: skip
    order = rng.permutation([c for c in range(num_chains) for _ in range(size)]).tolist()  # chains interleaved
    statements, first, step = [], {}, [0] * num_chains
    for c in order:
        rhs = values[c] if step[c] == 0 else names[c][step[c] - 1]
        first.setdefault(c, len(statements))
        statements.append([PLUS] + names[c][step[c]] + rhs)
        step[c] += 1
    depths = sorted(rng.integers(0, n + 1, size=len(statements)).tolist())
    q = int(rng.integers(0, num_chains))
    prompt = _insert(_haystack(n, num_symbols), statements, depths) + [QUERY] + values[q]
    return prompt, [t for name in names[q] for t in name], {"depth": depths[first[q]] / n}


def variable_tracking_reference(prompt, n, num_symbols, train_max_len, *, num_chains: int = 1, num_hops: int = 4,
                                name_length: int = 2):  # fmt: skip
    w = name_length
    bound = {}  # lhs -> rhs, in prompt order
    for i, t in enumerate(prompt):
        if t == PLUS:
            bound[tuple(prompt[i + 1 : i + 1 + w])] = tuple(prompt[i + 1 + w : i + 1 + 2 * w])
    value = tuple(prompt[prompt.index(QUERY) + 1 :])

    def resolve(name):
        while name in bound:
            name = bound[name]
        return name

    return [t for name in bound if resolve(name) == value for t in name]


def common_word_counts(n: int, num_symbols: int, num_common: int, ratio: int) -> tuple[int, int, int]:
    """(k, c, u) for a list of n words: k common words appear c = ratio * u times each, the other num_symbols - k
    words at most u times each. k is num_common where the list has room (k * c <= n), fewer for short lists; a list
    too short for any (n < ratio) is one word repeated (k = 1, c = n, u = 0)."""
    for k in range(min(num_common, n), 0, -1):
        u = ceil(n / (ratio * k + num_symbols - k))  # the uncommon words then hold the rest, n - k * c <= m * u
        if k * ratio * u <= n:
            return k, ratio * u, u
    return 1, n, 0


def common_words(rng, n, num_symbols, train_max_len, *, num_common: int = 3, ratio: int = 3):
    """prompt = a list of n words (symbols) then QUERY; answer = its `num_common` most frequent words, in
    increasing symbol order.

    RULER's cwe: the common words each appear c times, every other word at most c / `ratio` times (RULER: 30 and 3
    over a large vocabulary; here the alphabet is small, so the uncommon words repeat too, and c grows with n: see
    `common_word_counts`, which also gives the fewer common words of a short list). The uncommon occurrences are
    drawn without replacement from u copies of each uncommon word, so their counts vary in [0, u]. Deviation:
    RULER scores the words as a set in any order; exact match needs one order, increasing symbol id.
    """
    need_range("common_words", "num_common", num_common, 1)
    need_range("common_words", "ratio", ratio, 2)
    need_symbols("common_words", num_common + 1, num_symbols, "num_common common words and an uncommon one")
    k, c, u = common_word_counts(n, num_symbols, num_common, ratio)
    words = rng.permutation(num_symbols).tolist()
    common, uncommon = words[:k], words[k:]
    copies = [w for w in uncommon for _ in range(u)]
    picked = rng.choice(len(copies), size=n - k * c, replace=False) if copies else []
    listed = [w for w in common for _ in range(c)] + [copies[i] for i in picked]
    prompt = [SYMBOL0 + w for w in rng.permutation(listed).tolist()] + [QUERY]
    return prompt, [SYMBOL0 + w for w in sorted(common)]


def common_words_reference(prompt, n, num_symbols, train_max_len, *, num_common: int = 3, ratio: int = 3):
    listed = prompt[: prompt.index(QUERY)]
    counts = {t: listed.count(t) for t in set(listed)}
    top = max(counts.values())
    return sorted(t for t, c in counts.items() if c == top)
