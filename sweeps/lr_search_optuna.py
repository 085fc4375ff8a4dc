"""The Optuna study of sweeps/lr_search_optuna.yaml (`scheduler.optimizer: make_study`), loaded by W&B's
sweep scheduler (`wandb sweep-scheduler`) and by `cli.py sweep` alike: W&B calls it with the sweep's
`SweepInfo` and takes the study's sampler, pruner and direction."""

import optuna


def make_study(sweep) -> optuna.Study:
    """TPE with a fixed seed (Bergstra et al. 2011) and a median pruner that waits for 3 validations."""
    return optuna.create_study(
        direction="maximize",  # the sweep's metric goal; W&B checks that they agree
        sampler=optuna.samplers.TPESampler(seed=0, n_startup_trials=5),
        pruner=optuna.pruners.MedianPruner(n_startup_trials=3, n_warmup_steps=3),
    )
