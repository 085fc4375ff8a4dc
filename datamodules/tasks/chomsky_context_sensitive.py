"""Context-sensitive tasks of the Chomsky-hierarchy suite (Delétang et al. 2023), as in
google-deepmind/neural_networks_chomsky_hierarchy tasks/cs. Symbols are the paper's integer inputs and outputs
(symbol k = token SYMBOL0 + k); each generator has a reference that recomputes the answer another way.
Where the paper pads an output after a termination token and masks the padding out of the accuracy, the
padding here is unscored (IGNORE_INDEX): an encoder still gets every output slot, a decoder stops at the
terminator.
"""

from datamodules.tasks.tokens import IGNORE_INDEX, need_range, need_symbols, symbols, tokens

SEPARATOR = END = 2  # binary tasks: the operator symbol in the input, the termination class in the output


def _string(task: str, rng, n: int, num_symbols: int, alphabet: int) -> list[int]:
    need_range(task, "alphabet", alphabet, 2)
    need_symbols(task, alphabet, num_symbols, f"alphabet={alphabet}")
    return rng.integers(0, alphabet, size=n).tolist()


def duplicate_string(rng, n, num_symbols, train_max_len, *, alphabet: int = 2):
    """A string over `alphabet` symbols (2 in the paper); answer = the string twice."""
    s = _string("duplicate_string", rng, n, num_symbols, alphabet)
    return tokens(s), tokens(s + s)


def duplicate_string_reference(prompt, n, num_symbols, train_max_len, *, alphabet: int = 2):
    return [prompt[i % n] for i in range(2 * n)]


def missing_duplicate_string(rng, n, num_symbols, train_max_len):
    """ww for a binary w of n // 2 symbols, one symbol replaced by the placeholder 2, then the padding symbol 3
    when n is odd; answer = the replaced symbol. As the paper, n = 1 is the input [1] with answer 1."""
    need_symbols("missing_duplicate_string", 4, num_symbols, "2 values, placeholder, padding")
    if n == 1:
        return tokens([1]), tokens([1])
    w = rng.integers(0, 2, size=n // 2).tolist()
    ww = w + w
    idx = int(rng.integers(0, len(ww)))
    answer, ww[idx] = ww[idx], 2
    return tokens(ww + [3] * (n % 2)), tokens([answer])


def missing_duplicate_string_reference(prompt, n, num_symbols, train_max_len):
    s = symbols(prompt)
    if n == 1:
        return tokens([1])
    half, missing = n // 2, s.index(2)
    return tokens([s[missing + half if missing < half else missing - half]])


def odds_first(rng, n, num_symbols, train_max_len, *, alphabet: int = 2):
    """A string s over `alphabet` symbols (2 in the paper); answer = s[1::2] then s[0::2]. This follows the
    paper's code; its docstring example (s_1 s_3 ... first, 1-based) would be s[0::2] first."""
    s = _string("odds_first", rng, n, num_symbols, alphabet)
    return tokens(s), tokens(s[1::2] + s[0::2])


def odds_first_reference(prompt, n, num_symbols, train_max_len, *, alphabet: int = 2):
    return [prompt[i] for i in range(n) if i % 2] + [prompt[i] for i in range(n) if not i % 2]


def _little_endian(value: int, width: int = 0) -> list[int]:
    return [int(c) for c in reversed(f"{value:b}".zfill(width))]


def _operands(rng, n: int) -> tuple[list[int], int, int]:
    """`a 2 b` in little-endian binary, len(a) uniform in [1, n - 2], a and b uniform in [1, 2^len - 1]."""
    len_a = int(rng.integers(1, n - 1))
    len_b = n - 1 - len_a
    a, b = _positive(rng, len_a), _positive(rng, len_b)
    return _little_endian(a, len_a) + [SEPARATOR] + _little_endian(b, len_b), a, b


def _terminated(bits: list[int], width: int) -> list[int]:
    answer = bits + [END]
    return answer + [IGNORE_INDEX] * (width - len(answer))


def binary_addition(rng, n, num_symbols, train_max_len):
    """`a 2 b` (little-endian binary, n symbols); answer = a + b little-endian without trailing zeros, the
    termination class 2, unscored padding to n + 1. As the paper, n <= 2 is a single n-bit number in
    [0, 2^n - 2] whose answer is itself."""
    need_symbols("binary_addition", 3, num_symbols, "0, 1 and the separator")
    if n <= 2:
        value = int(rng.integers(0, 2**n - 1))
        return tokens(_little_endian(value, n)), tokens(_terminated(_little_endian(value), n + 1))
    expression, a, b = _operands(rng, n)
    return tokens(expression), tokens(_terminated(_little_endian(a + b), n + 1))


def _parse(prompt) -> list[int]:
    """The numbers of a little-endian binary expression (one or two, split at the separator)."""
    text = "".join(map(str, symbols(prompt)))
    return [int(part[::-1], 2) for part in text.split(str(SEPARATOR))]


def _answer_bits(value: int) -> list[int]:
    return [int(c) for c in bin(value)[:1:-1]]


def binary_addition_reference(prompt, n, num_symbols, train_max_len):
    return tokens(_terminated(_answer_bits(sum(_parse(prompt))), n + 1))


def binary_multiplication(rng, n, num_symbols, train_max_len):
    """`a 2 b` (little-endian binary, n symbols); answer = a * b little-endian without trailing zeros, the
    termination class 2, unscored padding to n. As the paper, n <= 2 is a single n-bit number whose answer is
    n - 1 zeros and the terminator."""
    need_symbols("binary_multiplication", 3, num_symbols, "0, 1 and the separator")
    if n <= 2:
        value = int(rng.integers(0, 2**n - 1))
        return tokens(_little_endian(value, n)), tokens([0] * (n - 1) + [END])
    expression, a, b = _operands(rng, n)
    return tokens(expression), tokens(_terminated(_little_endian(a * b), n))


def binary_multiplication_reference(prompt, n, num_symbols, train_max_len):
    numbers = _parse(prompt)
    if len(numbers) == 1:
        return tokens([0] * (n - 1) + [END])
    return tokens(_terminated(_answer_bits(numbers[0] * numbers[1]), n))


def compute_sqrt(rng, n, num_symbols, train_max_len):
    """An n-bit big-endian number uniform in [1, 2^n - 1]; answer = floor(sqrt) in ceil(n / 2) big-endian bits."""
    value = _positive(rng, n)
    root = _isqrt(value)
    return tokens(_little_endian(value, n)[::-1]), tokens(_little_endian(root, (n + 1) // 2)[::-1])


def _positive(rng, n: int) -> int:
    """Uniform in [1, 2^n - 1] for any n (n random bits, the all-zero draw rejected): Python ints, no int64
    overflow at the suite's lengths (hundreds of bits)."""
    while True:
        value = int("".join(map(str, rng.integers(0, 2, size=n))), 2)
        if value:
            return value


def _isqrt(value: int) -> int:
    low, high = 0, 1 << (value.bit_length() // 2 + 1)  # Newton-free bisection: largest r with r*r <= value
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if mid * mid <= value else (low, mid - 1)
    return low


def compute_sqrt_reference(prompt, n, num_symbols, train_max_len):
    import math

    root = math.isqrt(int("".join(map(str, symbols(prompt))), 2))
    return tokens([int(c) for c in format(root, "b").zfill((n + 1) // 2)])


def bucket_sort(rng, n, num_symbols, train_max_len, *, alphabet: int = 5):
    """A string over `alphabet` symbols (5 in the paper); answer = the string sorted."""
    s = _string("bucket_sort", rng, n, num_symbols, alphabet)
    return tokens(s), tokens(sorted(s))


def bucket_sort_reference(prompt, n, num_symbols, train_max_len, *, alphabet: int = 5):
    s = symbols(prompt)
    return tokens([k for k in range(alphabet) for _ in range(s.count(k))])
