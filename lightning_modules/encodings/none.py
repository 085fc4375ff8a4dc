from lightning_modules.encodings.base import PositionalEncoding


class NoPE(PositionalEncoding):
    """No positional encoding (NoPE): order is visible only through the causal mask.

    Kazemnejad et al., NeurIPS 2023, "The Impact of Positional Encoding on Length Generalization".
    Every hook is the base class's identity. Used bidirectionally it is permutation-equivariant.
    """

    name = "none"
    init_reference = {}
    shift_invariant = True
