"""Launchers that run one sweep on many machines. Public: `slurm` (`cli.py sweep --launcher slurm`: the sweep's
workers as one SLURM job array, submitted through submitit). Private: `slurm_task` (what each array task runs).
"""

__all__ = ["slurm"]
