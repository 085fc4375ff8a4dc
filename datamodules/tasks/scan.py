"""SCAN (Lake & Baroni 2018, "Generalization without Systematicity") from its grammar, with the length split's notion
of length, as Kazemnejad et al. 2023 use it (McGill-NLP/length-generalization, make_scan_dataset.py: the `length`
split regrouped by action-sequence length, train <= 25, test 26-48).

The grammar (Lake & Baroni's Table 1), every command once (20,910):
    C -> S and S | S after S | S          S -> V twice | V thrice | V
    V -> D[1] opposite D[2] | D[1] around D[2] | D | U   (a D's two words around the modifier: `turn opposite left`)
    D -> U left | U right | turn left | turn right          U -> walk | look | run | jump
and its meaning: `x left` = LTURN x, `x opposite left` = LTURN LTURN x, `x around left` = (LTURN x) x 4 (x empty for
`turn`), `v twice` / `thrice` repeat it, `a and b` = a b, `a after b` = b a.

Length n = the action sequence's length, the length split's; an example of length n is a command drawn uniformly
among all commands of n actions (the dataset holds every command once, so this is its distribution within a
length; across lengths the harness draws n uniformly, where the dataset has 6 commands of length 1 and 1,696 of
length 10, so a rare length weighs more than in theirs). Lengths with no command (23, 29, 31, 34, 35, 37-39, 41-47
and beyond 48) draw from the longest length below them (deviation: the harness asks for every length; their
per-length metrics repeat that length's, so evaluate SCAN with eval_max_len <= 48). Commands are words after the
shared vocabulary (13 tokens); actions are symbols 0-5.
"""

from functools import cache

from datamodules.tasks.tokens import need_symbols, tokens, vocab_size

WORDS = (
    "walk",
    "look",
    "run",
    "jump",
    "turn",
    "left",
    "right",
    "opposite",
    "around",
    "twice",
    "thrice",
    "and",
    "after",
)
ACTIONS = ("WALK", "LOOK", "RUN", "JUMP", "LTURN", "RTURN")  # Lake & Baroni's I_WALK, ..., I_TURN_LEFT, I_TURN_RIGHT
LONGEST_COMMAND = 9  # words: `walk opposite left thrice and walk opposite left thrice`


@cache
def commands_by_length() -> dict[int, list[tuple[tuple[str, ...], tuple[str, ...]]]]:
    """Every SCAN command with its action sequence, by the sequence's length (in a fixed order)."""
    primitives = {"walk": "WALK", "look": "LOOK", "run": "RUN", "jump": "JUMP"}
    turns = {"left": "LTURN", "right": "RTURN"}
    verbs = []  # V: (words, actions)
    for u, action in primitives.items():
        verbs.append(((u,), (action,)))
    for x in ("turn", *primitives):
        act = () if x == "turn" else (primitives[x],)
        for direction, turn in turns.items():
            verbs.append(((x, direction), (turn, *act)))
            verbs.append(((x, "opposite", direction), (turn, turn, *act)))
            verbs.append(((x, "around", direction), (turn, *act) * 4))
    sentences = [(w + suffix, a * times) for w, a in verbs for suffix, times in (((), 1), (("twice",), 2),
                                                                                 (("thrice",), 3))]  # fmt: skip
    commands = list(sentences)
    for w1, a1 in sentences:
        for w2, a2 in sentences:
            commands.append(((*w1, "and", *w2), a1 + a2))
            commands.append(((*w1, "after", *w2), a2 + a1))
    table: dict[int, list] = {}
    for words, actions in commands:
        table.setdefault(len(actions), []).append((words, actions))
    return dict(sorted(table.items()))


def _length(n: int) -> int:
    """The longest action-sequence length with a command that is at most n."""
    return max(m for m in commands_by_length() if m <= n)


def scan_task(rng, n, num_symbols, train_max_len):
    """prompt = a SCAN command (word tokens after the shared vocabulary), answer = its actions (symbols 0-5); a
    command of n actions, or of the longest length below n that has one (see the module docstring)."""
    need_symbols("scan", len(ACTIONS), num_symbols, "the 6 actions")
    candidates = commands_by_length()[_length(n)]
    words, actions = candidates[int(rng.integers(0, len(candidates)))]
    first = vocab_size(num_symbols, train_max_len)
    return [first + WORDS.index(w) for w in words], tokens(ACTIONS.index(a) for a in actions)


def _meaning(words: list[str]) -> list[str]:
    """The actions of a command, parsed top-down (the generator builds them bottom-up)."""
    for conjunction in ("and", "after"):
        if conjunction in words:
            i = words.index(conjunction)
            first, second = _meaning(words[:i]), _meaning(words[i + 1 :])
            return first + second if conjunction == "and" else second + first
    if words[-1] in ("twice", "thrice"):
        return _meaning(words[:-1]) * (2 if words[-1] == "twice" else 3)
    act = [] if words[0] == "turn" else [words[0].upper()]
    if len(words) == 1:
        return act
    turn = ["LTURN" if words[-1] == "left" else "RTURN"]
    return {2: turn + act, 3: {"opposite": turn * 2 + act, "around": (turn + act) * 4}.get(words[1])}[len(words)]


def scan_reference(prompt, n, num_symbols, train_max_len):
    first = vocab_size(num_symbols, train_max_len)
    return tokens(ACTIONS.index(a) for a in _meaning([WORDS[t - first] for t in prompt]))


def scan_limits(n, num_symbols, train_max_len) -> dict:
    """Longest command (9 words), the answer's length (n or the longest below with a command), the words' tokens."""
    return {
        "prompt": LONGEST_COMMAND,
        "answer": _length(n),
        "vocab": vocab_size(num_symbols, train_max_len) + len(WORDS),
    }
