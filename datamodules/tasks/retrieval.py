"""Retrieval from a long context, CPU-sized proxies of needle-in-a-haystack / RULER: passkey retrieval
(Mohtashami & Jaggi 2023, "Landmark Attention") and multi-query associative recall (MQAR; Arora et al. 2023,
"Zoology").
"""

from datamodules.tasks.tokens import PLUS, QUERY, SLOT, SYMBOL0, need_range, need_symbols


def passkey(rng, n, num_symbols, train_max_len, *, key_length: int = 5):
    """prompt = filler with `PLUS key` hidden at a uniform depth, then QUERY; answer = the key.

    The filler is n tokens of one repeated "sentence" (symbols 0, 1, ..., num_symbols - 1, as the paper repeats
    "The grass is green. The sky is blue. ..."); the key is `key_length` uniform symbols after the marker PLUS
    ("The pass key is"), inserted after d filler tokens, d uniform in [0, n]; the example's depth is d / n (0 =
    start, 1 = just before the question), logged in bins (`val/acc_depth_<percent>`). Length n = filler tokens.
    """
    need_range("passkey", "key_length", key_length, 1)
    filler = [SYMBOL0 + i % num_symbols for i in range(n)]
    key = (SYMBOL0 + rng.integers(0, num_symbols, size=key_length)).tolist()
    d = int(rng.integers(0, n + 1))
    return filler[:d] + [PLUS] + key + filler[d:] + [QUERY], key, {"depth": d / n}


def passkey_reference(prompt, n, num_symbols, train_max_len, *, key_length: int = 5):
    start = prompt.index(PLUS) + 1
    return prompt[start : start + key_length]


def mqar(rng, n, num_symbols, train_max_len, *, num_queries: int = 4):
    """prompt = k1 v1 ... kn vn QUERY q1 _ q2 _ ...; the value of each queried key is the answer, in place (the
    slots `_`): a decoder predicts it at the query key, as Zoology's MQAR.

    Keys are the first num_symbols // 2 symbols, values the others; each key is bound to one uniform value per
    example. Length n = key-value pairs. Keys are distinct while the key alphabet lasts (Zoology's, of thousands
    of keys, always is); a longer example lists the keys again in a fresh random order, with the same values.
    Queries: min(num_queries, distinct keys) distinct keys of the context in random order, right after it
    (deviation: Zoology places them at random distances; here the context length alone sets the recall distance).
    """
    need_symbols("mqar", 4, num_symbols, "keys and values: two halves of the symbols")
    need_range("mqar", "num_queries", num_queries, 1)
    num_keys = num_symbols // 2
    value = rng.integers(num_keys, num_symbols, size=num_keys)  # (num_keys,) each key's value
    keys = [int(k) for _ in range(-(-n // num_keys)) for k in rng.permutation(num_keys)][:n]
    queries = rng.choice(sorted(set(keys)), size=min(num_queries, len(set(keys))), replace=False).tolist()
    context = [SYMBOL0 + int(s) for k in keys for s in (k, value[k])]
    prompt = context + [QUERY] + [t for q in queries for t in (SYMBOL0 + q, SLOT)]
    return prompt, [SYMBOL0 + int(value[q]) for q in queries]


def mqar_reference(prompt, n, num_symbols, train_max_len, *, num_queries: int = 4):
    split = prompt.index(QUERY)
    bound = dict(zip(prompt[:split:2], prompt[1:split:2]))
    return [bound[q] for q in prompt[split + 1 :: 2]]
