import torch
from torch import Tensor, nn

from lightning_modules.encodings.sinusoidal import Sinusoidal


class ScaledSinusoidal(Sinusoidal):
    """Fixed sinusoid times one learned scalar, added to the token embeddings.

    The scaled sinusoid of x-transformers' `ScaledSinusoidalEmbedding` (scale initialised to C^-0.5, as
    there; used e.g. by Hua et al. 2022, "Transformer Quality in Linear Time"), checked against it. Same
    frequencies base^(-2i/C); channels interleaved (sin, cos) as the rest of the zoo, where x-transformers
    concatenates all sines then all cosines: a fixed permutation of the channels (the test undoes it).
    The scalar has shape (1,), so AdamW does not decay it. Shapes: x (B, L, C), positions (L,) or (B, L).
    """

    name = "scaled_sinusoidal"
    init_reference = {"scale": ("const", lambda e: e.dim**-0.5)}

    def __init__(self, **options):
        super().__init__(**options)
        self.scale = nn.Parameter(torch.full((1,), self.dim**-0.5))

    def embed(self, x: Tensor, positions: Tensor) -> Tensor:
        return x * self.token_scale + (self.scale * self.table(positions)).to(x.dtype)

    @property
    def weight(self) -> Tensor:
        """The scaled (max_length, C) table, for the PE-Study probes."""
        return (self.scale * super().weight.to(self.scale.device)).detach()
