"""Train, sweep and compare Transformers parameterised by their positional encoding.

To run:
    python cli.py fit --config configs/synthetic.yaml --data.task=copy --model.arch.encoding=rope
    python cli.py fit --config configs/synthetic.yaml --model.arch.encoding=tupe_r --model.causal=false
    python cli.py fit ... --model.arch.encoding_options='{base: 500}'   # an encoding's own options

    python cli.py sweep sweeps/quickstart.yaml --workers 2
    python cli.py compare --sweep quickstart --report out/report
    python cli.py probe --encoding sinusoidal --max-length 512 --dim 768
    python cli.py probe --hf-model path/to/gpt2          # a pre-trained model's position table

`fit | validate | test | predict` are LightningCLI's; every run logs to W&B (offline without an API
key) and leaves a record under `<run.out_dir>/runs/<name>-<time>/`.
"""

import time

PROCESS_START = time.time()  # before the heavy imports: start-up cost is recorded with each run

import inspect  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402
from pydoc import locate  # noqa: E402

import yaml  # noqa: E402
from jsonargparse import set_parsing_settings  # noqa: E402
from pytorch_lightning.callbacks import ModelSummary, ProgressBar  # noqa: E402
from pytorch_lightning.cli import LightningArgumentParser, LightningCLI  # noqa: E402

from datamodules.base import TaskDataModule  # noqa: E402
from datamodules.registry import DATA_MODULES  # noqa: E402
from lightning_modules.arg_checks import (  # noqa: E402
    check_not_linked,
    check_seed,
    check_trainer_args,
    given_arch_keys,
)
from lightning_modules.checkpoint_io import (  # noqa: E402
    HINT,
    check_given_arch,
    load_checkpoint,
    read_checkpoint,
    use_safe_checkpoint_io,
)
from lightning_modules.registry import TASK_MODULE_PATHS  # noqa: E402
from lightning_modules.schedule import check_scheduled_encoding  # noqa: E402
from lightning_modules.task_module import TaskModule, dotted_get  # noqa: E402
from pe_core.errors import ConfigError  # noqa: E402
from pe_sweeps import internals  # noqa: E402
from pe_sweeps.cli_errors import OneLineErrors  # noqa: E402
from pe_sweeps.exits import exit_in_one_line  # noqa: E402
from pe_sweeps.help_cache import is_help  # noqa: E402
from pe_sweeps.layout import (  # noqa: E402
    DEFAULT_OUT_DIR,
    ENSEMBLE_OUT_DIRS_ENV,
    OUT_DIR_ENV,
    OUT_ROOT_ENV,
    RECORD_FILE,
    SWEEP_ENV,
    checkpoint_run_dir,
    launch_rank,
    make_dir,
    new_run_dir,
    parent_run_dir,
    shipped_files,
)
from pe_sweeps.light_commands import SUBCOMMANDS, compare_main, overview, probe_main, sweep_main  # noqa: E402
from pe_sweeps.runs.callbacks import LogLearningRate, ModelSummaryWithFlops, StepProgressBar  # noqa: E402
from pe_sweeps.runs.checkpointing import LastCheckpoint  # noqa: E402
from pe_sweeps.runs.console import quiet_lightning_tips  # noqa: E402
from pe_sweeps.runs.record_writer import RecordWriter  # noqa: E402
from pe_sweeps.runs.records import check_name, find_checkpoint, read_record  # noqa: E402
from pe_sweeps.runs.run_naming import (  # noqa: E402
    distinguishing,
    run_group,
    run_name,
    setup_label,
    sweep_params,
)
from pe_sweeps.runs.wandb_setup import DEFAULT_PROJECT, make_wandb_logger  # noqa: E402
from pe_sweeps.sweep.children import check_given_gpus, start_watchdog  # noqa: E402

set_parsing_settings(docstring_parse_attribute_docstrings=True)  # ArchConfig's field docstrings are --help text
PREBUILT: dict = {}  # filled in a sweep's fork server by prepare_fork_server(): each forked trial takes the parser

# short class names accepted wherever a model or data class path is (`--model=SyntheticTaskModel`,
# `--model.help SyntheticTaskModel`)
CLASSES = {"model": TASK_MODULE_PATHS, "data": DATA_MODULES}  # the registries (lightning_modules, datamodules)
HEADINGS = {
    "model": "model: a task module (--model CLASS; --model.help CLASS lists its options)",
    "data": "data: a data module (--data CLASS; --data.help CLASS lists its options)",
}
OPTIMISATION = ("--optimizer", "--lr_scheduler")  # LightningCLI's; refused: the task modules own theirs


@dataclass
class RunOptions:
    """Where a run is recorded and how it is named."""

    # records, checkpoints and W&B files go under <out_dir>/runs/ (`cli.py sweep` sets PE_OUT_DIR: layout.py)
    out_dir: str = field(default_factory=lambda: os.environ.get(OUT_DIR_ENV, DEFAULT_OUT_DIR))
    # where `--model.init_from=run:NAME` looks for NAME; default out_dir (a sweep's trials: the sweep's out_dir)
    out_root: str | None = field(default_factory=lambda: os.environ.get(OUT_ROOT_ENV))
    wandb: bool = True  # W&B logger (offline without an API key; WANDB_MODE is respected)
    # W&B project and entity (`wandb agent` and `cli.py sweep` pass a sweep file's through WANDB_PROJECT/ENTITY)
    project: str = field(default_factory=lambda: os.environ.get("WANDB_PROJECT") or DEFAULT_PROJECT)
    entity: str | None = field(default_factory=lambda: os.environ.get("WANDB_ENTITY"))
    # sweep or study this run belongs to (`cli.py sweep` sets PE_SWEEP; W&B agents WANDB_SWEEP_ID)
    sweep: str | None = field(default_factory=lambda: os.environ.get(SWEEP_ENV))
    name: str | None = None  # default <task>-<encoding>[-<key>=<value> per parameter its sweep varies]-s<seed>
    # `fit`: once training has finished, evaluate the final model on the test split (test/... in this run's record,
    # reported by `compare --metric test/...`, never selected on)
    test_at_end: bool = False
    # `fit`: train this many seeds (seed_everything, +1, ...), or these seeds ([3, 7, 11], the first being
    # seed_everything), in one process as one seed ensemble, written as that many ordinary runs
    # (pe_sweeps/runs/ensemble_fit.py); 1: one run
    ensemble_seeds: int | list[int] = 1


class ParserBuilt(Exception):
    """Stops `prepare_fork_server`'s LightningCLI once its parser is built: nothing is parsed or run."""


class CheckedOnceParser(OneLineErrors, LightningArgumentParser):
    """LightningCLI's parser, whose dumps do not validate the config again: every config this CLI dumps (the
    run record's, the module's hyperparameters, config.yaml) is the one validated when it was parsed, and the
    three re-checks cost about 0.1 s of a trial's start-up. `--print_config` passes its own setting. A parse
    error is one line (cli_errors.py)."""

    def dump(self, cfg, *args, skip_validation: bool = True, **kwargs) -> str:
        if "skip_none" in kwargs:  # Lightning's SaveConfigCallback still passes jsonargparse's deprecated name
            kwargs["skip_unset"] = kwargs.pop("skip_none")
        return super().dump(cfg, *args, skip_validation=skip_validation, **kwargs)


class PECLI(LightningCLI):
    """LightningCLI wiring: shared sizes linked, run naming, W&B logger and the local run record."""

    prebuilding = False  # set by prepare_fork_server only
    only: str | None = None  # a subcommand's --help builds that subcommand's parser only (make_cli)
    ckpt_is_member = False  # --ckpt_path is a seed ensemble member's checkpoint (found when it is read at parsing)

    def subcommands(self) -> dict[str, set[str]]:
        every = super().subcommands()
        return {self.only: every[self.only]} if self.only in every else every

    def setup_parser(self, add_subcommands, main_kwargs, subparser_kwargs) -> None:
        """Build the parser (about 0.5 s), or take the one a sweep's fork server built before forking this
        trial (sweep/warm_start.py). jsonargparse reads defaults when the parser is built, so the
        defaults that come from the environment (`RunOptions`) are read again here, in the trial."""
        if add_subcommands and PREBUILT and not self.prebuilding:
            built = PREBUILT.pop("cli")
            vars(self).update(built)
            fresh = {f"run.{key}": value for key, value in vars(RunOptions()).items()}
            for parser in internals.subcommand_parsers(self):
                parser.set_defaults(fresh)
            return
        before = set(vars(self))
        super().setup_parser(add_subcommands, main_kwargs, subparser_kwargs)
        if self.prebuilding:
            PREBUILT["cli"] = {key: value for key, value in vars(self).items() if key not in before}
            raise ParserBuilt

    def add_arguments_to_parser(self, parser) -> None:
        # the usage line names no option (the ~50 lines of every --trainer.* were the options listed below again),
        # and the model's and data's headings say what they are (Lightning's: a class repr, a cut docstring)
        parser.usage = "%(prog)s [options]"
        for key, title in HEADINGS.items():
            if key in (parser.groups or {}):
                parser.groups[key].title = title
        parser.epilog = (
            "Model and data options: `--model.help CLASS` / `--data.help CLASS` (short names: "
            f"{', '.join(CLASSES['model'])}; {', '.join(CLASSES['data'])}), or `--print_config` with a --config."
        )
        parser.add_class_arguments(RunOptions, "run")
        parser.link_arguments("data.vocab_size", "model.init_args.arch.vocab_size", apply_on="instantiate")
        parser.link_arguments("data.max_seq_len", "model.init_args.arch.max_length", apply_on="instantiate")
        # classifier only: a link whose source attribute is missing is skipped, one whose target parameter
        # is missing still lands in the model's hparams, hence source names only classification data has
        parser.link_arguments("data.classifier_task", "model.init_args.task", apply_on="instantiate")
        parser.link_arguments("data.num_labels", "model.init_args.num_labels", apply_on="instantiate")
        parser.link_arguments("data.label_names", "model.init_args.labels", apply_on="instantiate")
        parser.link_arguments("model.init_args.causal", "data.init_args.causal", apply_on="parse")
        # fine-tuning: the data reads the pre-trained checkpoint's tokenizer (links skip classes without these)
        parser.link_arguments("model.init_args.init_from", "data.init_args.init_from", apply_on="parse")

    def parse_arguments(self, parser, args) -> None:
        """Parse, then check registry names before anything is seeded, logged or instantiated."""
        argv = [a for a in (args if isinstance(args, list) else sys.argv[1:]) if isinstance(a, str)]
        self.given_argv = argv  # what the command line set beyond the config file: run names and groups
        check_not_linked(argv)
        super().parse_arguments(parser, args)
        subcommand = self.config.get("subcommand")
        config = self.config.get(subcommand) if subcommand else self.config
        if config.get("run.name") is not None:
            check_name("--run.name", config.run.name)
        model_args = config.get("model.init_args") or {}
        check_trainer_args(config.get("trainer") or {}, fit=subcommand in (None, "fit"))
        check_seed(config.get("seed_everything"))
        ensemble = subcommand in (None, "fit") and is_ensemble(config.get("run.ensemble_seeds", 1))
        if ensemble:  # before any run folder is made
            from pe_sweeps.runs.ensemble_fit import check_ensemble_options

            trainer, run = config.get("trainer") or {}, config.run
            check_ensemble_options(run.ensemble_seeds, config.get("seed_everything"), trainer.get("max_steps"),
                                   trainer.get("val_check_interval"), trainer.get("devices"),
                                   trainer.get("accelerator"), run.test_at_end)  # fmt: skip
        model_class = locate(config.get("model.class_path") or "")
        if isinstance(model_class, type) and issubclass(model_class, TaskModule):
            restore_option_nulls(config, model_class)
            for name, options in model_class.declared_encodings(model_args).values():  # as the module declares them
                check_scheduled_encoding(name, options)  # a name, or a list with one per layer
                if ensemble:  # before its run folders
                    from lightning_modules.ensemble import check_ensemble_encoding
                    from lightning_modules.schedule_label import is_label, label_pattern

                    check_ensemble_encoding(label_pattern(name) if is_label(name) else name)
        if model_args.get("init_from"):  # `run:NAME` -> that run's checkpoint, for the model and its data
            root = config.run.out_root or config.run.out_dir  # a sweep trial searches the whole sweep root
            arch = model_args.get("arch")
            fields = {**vars(model_args), **(vars(arch) if arch is not None else {})}  # NAME's {encoding}, {dim}...
            path = find_checkpoint(model_args["init_from"], root, fields)
            config["model.init_args.init_from"] = path
            if "init_from" in (config.get("data.init_args") or {}):
                config["data.init_args.init_from"] = path
        data_class = locate(config.get("data.class_path") or "")
        if isinstance(data_class, type) and issubclass(data_class, TaskDataModule):  # the data modules' contract
            data_class.check_args(**vars(config.data.init_args))
        if config.get("ckpt_path"):  # read before LightningCLI puts its hyper-parameters in the config
            checkpoint = load_checkpoint(config.ckpt_path, "--ckpt_path")
            self.ckpt_is_member = "pe_ensemble" in checkpoint and subcommand in (None, "fit")
            if self.ckpt_is_member:  # a seed ensemble member's (ensemble_checkpoint): resumable?
                from pe_sweeps.runs.ensemble_fit import check_member_checkpoint

                check_member_checkpoint(checkpoint, f"--ckpt_path {config.ckpt_path!r}")
            if config.get("model.init_args.arch") is not None:
                check_given_arch(config.ckpt_path, checkpoint, config.model.init_args.arch.as_dict(),
                                 given_arch_keys(argv))  # fmt: skip
        check_given_gpus()  # a sweep's trial given GPUs never trains on the CPU instead
        default_cuda_precision(config)

    def before_instantiate_classes(self) -> None:
        """A null `data.seed` (the configs' default) becomes the run's seed, so over seeds the data (training
        examples, their order, generated evaluation sets) varies with the initialisation; an integer keeps the
        data fixed. Runs after LightningCLI has drawn a `seed_everything: true` seed."""
        config = self.config[self.subcommand] if self.subcommand else self.config
        data_args = config.get("data.init_args")
        self.data_seed_follows = data_args is not None and "seed" in data_args and data_args.seed is None
        if self.data_seed_follows:
            seed = config.get("seed_everything")
            data_args.seed = seed if isinstance(seed, int) and not isinstance(seed, bool) else 0

    @staticmethod
    def _run_dir(out_dir: str, name: str) -> Path:
        """A new run folder, made by global rank 0 only, now, so that the ranks Lightning starts later find it.
        Another rank takes rank 0's when rank 0's process started it (its pid names the folder), else a path
        it never creates: only rank 0 writes the record, checkpoints (ModelCheckpoint broadcasts rank 0's
        folder) and W&B files, so a launcher's ranks (torchrun, srun) leave one folder."""
        if launch_rank() > 0:
            return parent_run_dir(out_dir, name) or new_run_dir(out_dir, name)
        return make_dir(new_run_dir(out_dir, name), "--run.out_dir")

    def _out_dir(self, run: RunOptions, config) -> str:
        """`--run.out_dir`; `--trainer.default_root_dir` when given and --run.out_dir is left at its default
        (Lightning keeps that folder for its own files, e.g. SLURM requeue checkpoints)."""
        root = config.trainer.get("default_root_dir")
        return str(root) if root and run.out_dir == os.environ.get(OUT_DIR_ENV, DEFAULT_OUT_DIR) else run.out_dir

    def _resumed_run(self, config) -> tuple[Path, dict] | None:
        """`fit` resuming from a checkpoint of a run (`--ckpt_path=<run>/checkpoints/last.ckpt`, a sweep's
        retry, or Lightning's SLURM requeue checkpoint in --trainer.default_root_dir): that run's folder and
        record, to be continued; None for a fresh run."""
        if self.subcommand != "fit":  # validate / test / predict: a run of their own, the fit's record untouched
            return None
        checkpoint, root = config.get("ckpt_path"), config.trainer.get("default_root_dir")
        option, hint = "--ckpt_path", HINT
        if checkpoint is None and root:
            from lightning_fabric.plugins.environments import SLURMEnvironment

            checkpoint = hpc_checkpoint(root) if SLURMEnvironment.detect() else None
            option, hint = "SLURM requeue checkpoint", "move it out of --trainer.default_root_dir to start afresh"
        if not checkpoint or checkpoint in ("last", "best", "hpc", "registry") or not Path(checkpoint).is_file():
            return None
        run_dir = checkpoint_run_dir(checkpoint) or stored_run_dir(checkpoint, option, hint)
        previous = read_record(run_dir / RECORD_FILE, warn=False) if run_dir else None
        return (run_dir, previous) if previous else None

    def _distinguishing(self, config) -> dict:
        """What sets this run apart beyond task, encoding and seed (run_naming.distinguishing)."""
        model = type(self.model)
        options = {path: dotted_get(self.model.hparams, path) for _, path in model.ENCODING_ARGS.values()}
        default = inspect.signature(model).parameters.get("arch")
        default_arch = default.default.as_dict() if hasattr(getattr(default, "default", None), "as_dict") else {}
        arch = dict(self.model.hparams.get("arch") or {})
        return distinguishing(options, arch, default_arch, getattr(self, "given_argv", []))

    def instantiate_trainer(self, **kwargs):
        config = self.config[self.subcommand]
        run: RunOptions = self.config_init[self.subcommand].run
        task = self.datamodule.task  # a TaskDataModule names its task: the run's name and group
        encoding = self.model.run_encoding
        seed = config.seed_everything
        distinct = self._distinguishing(config)
        varied = sweep_params()
        varied = {**distinct, **{k: v for k, v in varied.items() if not any(d.startswith(k) for d in distinct)}}
        name = run.name or run_name(task, encoding, seed, varied)
        self.run_varied = varied  # a seed ensemble's other members are named with it
        sweep = run.sweep or os.environ.get("WANDB_SWEEP_ID")
        resumed = self._resumed_run(config)
        previous = resumed[1] if resumed else None
        if resumed:  # the same run: its folder, name, sweep and W&B run
            run_dir, name, sweep = resumed[0], previous.name or name, sweep or previous.sweep
            if launch_rank() == 0:
                wandb_id = previous.wandb.get("id")
                print(f"resuming run {run_dir}" + (f" (W&B run {wandb_id})" if wandb_id else ""), flush=True)
        else:
            run_dir = self._run_dir(self._out_dir(run, config), name)
        identity = {
            "name": name, "group": run_group(task, setup_label(encoding, distinct), sweep or run.project),
            "task": task, "encoding": encoding, "distinct": distinct, "seed": seed,
            "data_seed": getattr(self.datamodule, "seed", None), "sweep": sweep,
            "subcommand": self.subcommand, "process_start": PROCESS_START,
        }  # fmt: skip
        resolved = yaml.safe_load(self._parser(self.subcommand).dump(config, skip_link_targets=False))
        model_args = resolved["model"]["init_args"]  # values linked at instantiation are not in `config`
        # (a None default is left out of the dump: a value linked into it, e.g. the class names, is added)
        model_args.update({k: v for k, v in self.model.hparams.items() if k in model_args or v is not None})
        self.run_record = RecordWriter(run_dir, identity, resolved, previous)
        callbacks = [self.run_record]
        if config.trainer.enable_checkpointing is not False:
            # one file, the last state, rewritten at each validation and at the end (a "best" needs a metric a plain
            # fit does not choose; the records keep each metric's best value, `compare --value best`)
            saved = self.run_record.checkpoint_saved
            callbacks.append(LastCheckpoint(run_dir / "checkpoints", on_saved=saved, resuming=resumed is not None))
        configured = self.config_init[self.subcommand].trainer.callbacks or []
        configured = configured if isinstance(configured, list) else [configured]
        if config.trainer.enable_progress_bar is not False and not any(isinstance(c, ProgressBar) for c in configured):
            callbacks.append(StepProgressBar())  # "step 120/3000", not Lightning's "Epoch 0/-2"
        if config.trainer.enable_model_summary is not False and not any(
            isinstance(c, ModelSummary) for c in configured
        ):
            callbacks.append(ModelSummaryWithFlops())  # its FLOPs row is the model's, not Lightning's "0"
        kwargs["callbacks"] = callbacks + configured
        internals.skip_no_op_metric_moves()  # each self.log's move of a metric already on its device: 0.3 ms a step
        if run.wandb and config.trainer.logger is False:
            if launch_rank() == 0:
                print("W&B is off: --trainer.logger=false turns every logger off (--run.wandb=false says so too)")
        elif run.wandb and (
            is_ensemble(run.ensemble_seeds) or self.ensemble_checkpoint is not None
        ):  # a W&B run per member, written after training (ensemble_fit.py)
            self.member_logger = lambda writer: make_wandb_logger(
                writer.path.parent, writer.record.name, writer.record.group, run.project, run.entity,
                [task, encoding] + ([sweep] if sweep else []),
            )  # fmt: skip
            kwargs["logger"] = False  # this Trainer never trains: Lightning's default CSV logger would only warn
        elif run.wandb:
            tags = [task, encoding] + ([sweep] if sweep else [])
            run_id = previous.wandb.get("id") if previous else None  # a resumed run continues its W&B run
            wandb_logger = make_wandb_logger(
                run_dir,
                name,
                identity["group"],
                run.project,
                run.entity,
                tags,
                run_id=run_id,
                best=previous.best if previous else None,
            )
            # a user's --trainer.logger runs beside W&B, which stays first: the run folder keeps config.yaml
            own = self.config_init[self.subcommand].trainer.logger
            own = [] if own in (None, True) else own if isinstance(own, list) else [own]
            kwargs["logger"] = [wandb_logger, *own] if own else wandb_logger
            kwargs["callbacks"].append(LogLearningRate())
        quiet_lightning_tips()
        if not config.trainer.get("default_root_dir"):  # a user's is Lightning's (its SLURM requeue checkpoints)
            kwargs["default_root_dir"] = str(run_dir)
        trainer = super().instantiate_trainer(**kwargs)
        use_safe_checkpoint_io(trainer)  # Lightning's own restore (--ckpt_path, SLURM requeue) reads plain data only
        return trainer

    def fit(self, model, **kwargs) -> None:
        """`fit`: Trainer.fit, or with `--run.ensemble_seeds K` the K seeds as one seed ensemble (K run records)."""
        run: RunOptions = self.config_init[self.subcommand].run
        if not is_ensemble(run.ensemble_seeds) and self.ensemble_checkpoint is None:
            return self.trainer.fit(model, **kwargs)
        return self._fit_ensemble(run)

    @property
    def ensemble_checkpoint(self) -> dict | None:
        """`fit --ckpt_path` of a seed ensemble's member (its `pe_ensemble` training state), read once; else None:
        such a checkpoint resumes as an ensemble (of one, without --run.ensemble_seeds), never as Lightning's."""
        if not hasattr(self, "_ensemble_checkpoint"):
            path = self.config[self.subcommand].get("ckpt_path") if self.subcommand == "fit" else None
            self._ensemble_checkpoint = None
            if path and self.ckpt_is_member:  # read whole: its file is rewritten while it trains, under a memory map
                self._ensemble_checkpoint = read_checkpoint(path, "--ckpt_path", mmap=False)
        return self._ensemble_checkpoint

    def _fit_ensemble(self, run: RunOptions) -> None:
        from pe_sweeps.runs.ensemble_fit import (
            Member,
            fit_ensemble,
            member_config,
            member_seeds,
            replay_to_wandb,
            resumed_members,
        )

        config = self.config[self.subcommand]
        trainer = config.trainer
        first, seeds = self.run_record, member_seeds(run.ensemble_seeds, config.seed_everything)
        resumes = resumed_members(self.ensemble_checkpoint, seeds) if self.ensemble_checkpoint else {}
        member_dirs = json.loads(os.environ.get(ENSEMBLE_OUT_DIRS_ENV) or "{}")
        data_class, data_args = type(self.datamodule), dict(vars(config.data.init_args))
        members = []
        for seed in seeds:
            if seed in resumes and resumes[seed] is None:  # it had finished or diverged: its record is final
                continue
            if seed == config.seed_everything:
                writer, data = first, self.datamodule
            elif seed in resumes:  # its own run folder and record, continued
                run_dir = resumes[seed]["run_dir"]
                previous = read_record(run_dir / RECORD_FILE, warn=False)
                data = data_class(**(data_args | ({"seed": seed} if self.data_seed_follows else {})))
                identity = {k: getattr(previous, k) for k in ("name", "group", "task", "encoding", "distinct", "seed",
                                                              "data_seed", "sweep", "subcommand")}  # fmt: skip
                writer = RecordWriter(run_dir, identity | {"process_start": PROCESS_START}, previous.config, previous)
            else:
                data = data_class(**(data_args | ({"seed": seed} if self.data_seed_follows else {})))
                record = first.record
                name = (
                    f"{run.name}-s{seed}" if run.name else run_name(record.task, record.encoding, seed, self.run_varied)
                )
                identity = {k: getattr(record, k) for k in ("group", "task", "encoding", "distinct", "sweep",
                                                            "subcommand", "process_start")}  # fmt: skip
                identity |= {"name": name, "seed": seed, "data_seed": getattr(data, "seed", None)}
                out_dir = member_dirs.get(str(seed)) or self._out_dir(run, config)  # a sweep's: that seed's trial
                run_dir = self._run_dir(out_dir, name)
                writer = RecordWriter(run_dir, identity, member_config(record.config, seed, self.data_seed_follows))
            resume = (
                self.ensemble_checkpoint if seed == config.seed_everything else resumes.get(seed, {}).get("checkpoint")
            )
            members.append(Member(seed, data, writer, resume=resume))
        if run.name:
            first.record.name = f"{run.name}-s{config.seed_everything}"
        model_class, accepted = type(self.model), inspect.signature(type(self.model)).parameters
        hparams = {k: v for k, v in self.model.hparams_initial.items() if k in accepted}  # not Lightning's _class_path
        clip = trainer.get("gradient_clip_val")
        fit_ensemble(lambda seed: model_class(**hparams), members, trainer.max_steps, trainer.val_check_interval,
                     clip, hyper_parameters=dict(self.model.hparams_initial))  # fmt: skip
        for member in members:
            if getattr(self, "member_logger", None) is not None:
                replay_to_wandb(member, self.member_logger(member.writer), trainer.get("log_every_n_steps") or 50)
            print(f"run {member.writer.path.parent}: seed {member.seed}, {member.writer.record.status}", flush=True)

    def after_fit(self) -> None:
        """With --run.test_at_end, the final model on the test split (a finished fit only); then a short table of
        the final and best validation metrics, the record and how to sync W&B."""
        if is_ensemble(self.config_init[self.subcommand].run.ensemble_seeds) or self.ensemble_checkpoint is not None:
            return
        if self.config_init[self.subcommand].run.test_at_end and not self.trainer.interrupted:
            self.trainer.test(self.model, datamodule=self.datamodule, verbose=False)
        if self.trainer.is_global_zero:
            from pe_sweeps.runs.summary import print_fit_summary

            print_fit_summary(self.run_record.record, self.run_record.path)


def is_ensemble(ensemble_seeds: int | list[int]) -> bool:
    """Whether `--run.ensemble_seeds` asks for a seed ensemble (a list of seeds, or a count other than 1)."""
    return isinstance(ensemble_seeds, list) or ensemble_seeds != 1


def hpc_checkpoint(folder: str) -> str | None:
    """The newest of Lightning's SLURM requeue checkpoints (`hpc_ckpt_<n>.ckpt`) in `folder`, if any."""
    prefix = "hpc_ckpt_"
    found = [
        (int(p.stem[len(prefix) :]), p) for p in Path(folder).glob(f"{prefix}*.ckpt") if p.stem[len(prefix) :].isdigit()
    ]
    return str(max(found)[1]) if found else None


def stored_run_dir(checkpoint: str, option: str = "--ckpt_path", hint: str = HINT) -> Path | None:
    """The run folder a checkpoint names (`pe_run_dir`, written by RecordWriter) when it still holds a record;
    None for a checkpoint without one. Read as plain data only (`read_checkpoint`): an unreadable or crafted
    file is a one-line ConfigError naming `option`, before any run folder is made."""
    stored = read_checkpoint(checkpoint, option, hint)
    stored = stored.get("pe_run_dir") if isinstance(stored, dict) else None
    return Path(stored) if isinstance(stored, str) and stored and (Path(stored) / RECORD_FILE).is_file() else None


def trains_on_cuda_with_bf16(accelerator) -> bool:
    """Whether `--trainer.accelerator` resolves to CUDA devices with native bf16 (Ampere or later), as
    Lightning's `auto` / `gpu` choose (CUDA when `CUDAAccelerator.is_available()`)."""
    import torch
    from pytorch_lightning.accelerators import CUDAAccelerator

    if accelerator not in ("auto", "gpu", "cuda") or not CUDAAccelerator.is_available():
        return False
    return torch.cuda.device_count() > 0 and torch.cuda.is_bf16_supported(including_emulation=False)


def default_cuda_precision(config) -> None:
    """On CUDA with bf16, a run that does not set `--trainer.precision` trains in `bf16-mixed` (SDPA's
    FlashAttention kernels take only fp16 / bf16) with TF32 matmuls for what stays in fp32; set into the parsed
    config, so the run's config.yaml and record say so. `--trainer.precision=32-true` keeps full fp32; on the
    CPU nothing changes (fp32)."""
    trainer = config.get("trainer")
    if trainer is None or not trains_on_cuda_with_bf16(trainer.get("accelerator") or "auto"):
        return
    if trainer.get("precision") is None:
        config["trainer.precision"] = "bf16-mixed"
    if str(config["trainer.precision"]) not in ("32-true", "32", "64-true", "64"):
        import torch

        torch.set_float32_matmul_precision("high")  # TF32 (recorded as the record's matmul_precision)


def restore_option_nulls(config, model_class: type[TaskModule]) -> None:
    """jsonargparse hands a `--model.arch.*` value (a dataclass inside the model's class) on as Python text
    (`{rotary_dim: null}` arrives as "{'rotary_dim': None}"), so a null inside encoding options would come back
    as the string 'None'. No option takes that string: it is null again here, before anything is checked,
    logged or saved (a config file's null, and `--data.*` values, arrive intact)."""
    for _, options_path in model_class.ENCODING_ARGS.values():
        key = f"model.init_args.{options_path}"
        options = config.get(key)
        if isinstance(options, dict) and "None" in options.values():
            config[key] = {k: None if v == "None" else v for k, v in options.items()}


EXTRA_COMMANDS = {"sweep": sweep_main, "compare": compare_main, "probe": probe_main}


def expand_class_names(argv: list[str]) -> list[str]:
    """`--model=SyntheticTaskModel`, `--model.help SyntheticTaskModel`, `--data.class_path=...` with a short
    class name -> the full import path (jsonargparse wants a dotted path there)."""
    out = list(argv)
    for i, arg in enumerate(out):
        for group, names in CLASSES.items():
            for option in (f"--{group}", f"--{group}.help", f"--{group}.class_path"):
                if arg.startswith(option + "=") and arg.split("=", 1)[1] in names:
                    out[i] = f"{option}={names[arg.split('=', 1)[1]]}"
                elif arg == option and i + 1 < len(out) and out[i + 1] in names:
                    out[i + 1] = names[out[i + 1]]
    return out


def check_optimisation_args(argv: list[str]) -> None:
    """--optimizer / --lr_scheduler would replace the modules' AdamW and schedule while model.lr is still
    logged: refused in one line, naming what does set them."""
    used = next((a.split("=", 1)[0] for a in argv if a.split("=", 1)[0].split(".", 1)[0] in OPTIMISATION), None)
    if used:
        raise ConfigError(
            f"{used} is not supported: every task module trains with AdamW, linear warm-up and a decay schedule "
            "(lightning_modules/optim.py); set --model.lr, --model.weight_decay, --model.warmup_steps, --model.lr_decay"
        )


def make_cli(args: list[str] | None) -> PECLI:
    argv = sys.argv[1:] if args is None else args
    cli_class = PECLI
    if is_help(argv):  # `fit --help` needs fit's parser, not validate's, test's and predict's (~3/4 of the build)
        cli_class = type("PECLI", (PECLI,), {"only": argv[0]})
    return cli_class(
        seed_everything_default=0,
        save_config_kwargs={"overwrite": True},
        auto_configure_optimizers=False,
        args=args,
        parser_class=CheckedOnceParser,
    )


def prepare_fork_server() -> None:
    """Build the fit/validate/test/predict parser once, in a sweep's fork server, for every trial it forks
    (each child takes its own copy of the server's memory: a parser is never shared between trials)."""
    PECLI.prebuilding = True
    argv, sys.argv = sys.argv, ["cli.py"]  # the parsers' prog, which a parse error names (the server's is -c)
    try:
        make_cli([])
    except ParserBuilt:
        pass
    finally:
        PECLI.prebuilding, sys.argv = False, argv


def cli_main(args: list[str] | None = None):
    """Entry point. A ConfigError (bad name, size, option or file) is one line on stderr and exit 2;
    a diverged loss one line and exit 3 (its run record says `diverged`)."""
    argv = shipped_files(sys.argv[1:] if args is None else args)
    if args is not None:
        args = argv
    if argv[:1] in (["-h"], ["--help"]):
        print(overview())
        return None
    try:
        if argv and argv[0] in EXTRA_COMMANDS:
            return EXTRA_COMMANDS[argv[0]](argv[1:])
        if argv and not argv[0].startswith("-") and argv[0] not in SUBCOMMANDS:
            raise ConfigError(f"unknown command {argv[0]!r}; choose one of: {', '.join(SUBCOMMANDS)}")
        check_optimisation_args(argv)
        if args is None:  # LightningCLI warns when given both `args` and a command line
            sys.argv[1:] = expand_class_names(argv)
        return make_cli(None if args is None else expand_class_names(args))
    except Exception as error:
        exit_in_one_line(error)
        raise


def main() -> None:
    """`pe-sweeps ...`, `python -m pe_sweeps ...` and `python cli.py ...`: a sweep's trial first starts the
    watchdog that makes it exit with its sweep (sweep/children.py), then the command runs."""
    start_watchdog()
    cli_main()


if __name__ == "__main__":
    main()
