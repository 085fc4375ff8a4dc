from lightning_modules.encodings.tupe import TupeA


class TupeATiedCLS(TupeA):
    """TUPE-A with [CLS] tied: `tupe_a` with `untie_cls=False` by default, under its own registry name.

    The ablation "TUPE-A with tied [CLS]" of Ke, He & Liu, ICLR 2021 (GLUE avg 83.81 vs 84.47 untied,
    PAPERS.md section 2): [CLS] is treated as an ordinary position 0. A name of its own lets sweeps, run
    names and the comparison table tell it apart from `tupe_a` (sweeps/tupe_glue.yaml).
    """

    name = "tupe_a_tied"

    def __init__(self, *, untie_cls: bool = False, **kwargs):
        super().__init__(untie_cls=untie_cls, **kwargs)
