"""The shared machinery of the learned-rotation encodings (LieRE, ComRoPE): R(p) = exp(p s S), S skew-symmetric."""

from typing import ClassVar

import torch
from torch import Tensor

from lightning_modules.encodings.base import PositionalEncoding
from pe_core.errors import ConfigError
from pe_core.ranges import PositiveFloat, PositiveInt


class SkewGeneratorRotation(PositionalEncoding):
    """Rotate q and k at position p by R(p) = exp(p s S), S a learned block-diagonal skew-symmetric (D, D) generator.

    A subclass defines `generator()`: S as (H or 1, D/b, b, b) blocks along the diagonal (b = `block_size`,
    contiguous dims (b i, ..., b i + b - 1) of each head), one per head or one shared. Since S is fixed within a
    forward, {R(p)} is a one-parameter subgroup of SO(D): R(p)^T = R(-p), R(p + q) = R(p) R(q), so
    (R(m) q)^T (R(n) k) = q^T R(n - m) k depends on n - m only (relative, `shift_invariant`). `position_scale` s
    multiplies the positions first (default 1: token indices; the references normalise their patch positions to
    [0, 1] over the training grid, which s = 1 / training length reproduces; it is an option, not derived from
    max_length, so that a model's function does not depend on the length it was built for). The hook computes exp
    for every (position, head, block) in one batched `torch.linalg.matrix_exp` in float32 (for b = 2 the closed
    form [[cos a, -sin a], [sin a, cos a]] of exp([[0, -a], [a, 0]]), which compiles much faster), shared by q and
    k: one call per layer, nothing kept across calls (the generator is a parameter: a cache would need the autograd
    graph of an earlier step). Applied as R x on each block.
    """

    float_positions: ClassVar[bool] = True
    shift_invariant: ClassVar[bool] = True
    init_reference: ClassVar[dict[str, tuple] | None] = None

    def __init__(self, *, block_size: PositiveInt | None = None, position_scale: PositiveFloat = 1.0,
                 **common):  # fmt: skip
        super().__init__(**common)
        self.block_size = self.head_dim if block_size is None else block_size
        if self.head_dim % self.block_size:
            raise ConfigError(f"{self.name} block_size must divide the head dim {self.head_dim}, got {self.block_size}")
        self.num_blocks = self.head_dim // self.block_size
        self.position_scale = position_scale

    def generator(self) -> Tensor:
        """The skew-symmetric blocks of S, (H or 1, D/b, b, b) in float32."""
        raise NotImplementedError

    def rotations(self, positions: Tensor) -> Tensor:
        """(L,) or (B, L) positions -> R(p) blocks (H', L, D/b, b, b) or (B, H', L, D/b, b, b), H' = H or 1."""
        s = self.generator()  # (H', n, b, b)
        p = positions.to(s.dtype) * self.position_scale
        if self.block_size == 2:  # exp([[0, -a], [a, 0]]) = [[cos a, -sin a], [sin a, cos a]], exactly
            angle = p[..., None, None] * s[..., 1, 0]  # (L, H', n) or (B, L, H', n)
            cos, sin = angle.cos(), angle.sin()
            rotation = torch.stack((cos, -sin, sin, cos), dim=-1).unflatten(-1, (2, 2))
        else:
            rotation = torch.linalg.matrix_exp(p[..., None, None, None, None] * s)  # (..., L, H', n, b, b)
        return rotation.transpose(-5, -4)

    def rotate_one(self, x: Tensor, rotation: Tensor) -> Tensor:
        """R(p) x on each block of x (B, H, L, D)."""
        blocks = x.float().unflatten(-1, (self.num_blocks, self.block_size))[..., None]  # (B, H, L, n, b, 1)
        return (rotation @ blocks).flatten(-3).type_as(x)

    def rotate(self, q: Tensor, k: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
        rotation = self.rotations(positions)
        return self.rotate_one(q, rotation), self.rotate_one(k, rotation)

    @torch.no_grad()
    def rotation_matrix(self, p: float) -> Tensor:
        """R(p) = exp(p s S) as dense (H', D, D) matrices in float64, exponentiating the whole block-diagonal S (not
        block by block, as the hook does). For tests of the group law; the hooks never build it."""
        s = self.generator().double()
        dense = torch.stack([torch.block_diag(*head) for head in s])  # (H', D, D)
        return torch.linalg.matrix_exp(p * self.position_scale * dense)

    def extra_repr(self) -> str:
        return f"block_size={self.block_size}, position_scale={self.position_scale:g}"
