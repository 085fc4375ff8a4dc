"""Each init option's `--help` text, written where jsonargparse reads it: an `Args:` section on `__init__` built from
a table of descriptions (the task modules' `options_help`, the data modules' `data_options_help`)."""

import inspect


def document_options(shared: dict[str, str], own: dict[str, str]):
    """Class decorator: an `Args:` section on `__init__` describing each of its named options (from `own`, else
    `shared`); an option left undescribed, or described but not taken, is a TypeError at import. `**kwargs` is not
    an option: jsonargparse follows it into the base class's `__init__`, whose own section describes those."""

    def document(cls):
        params = inspect.signature(cls.__init__).parameters.values()
        names = [p.name for p in params if p.name != "self" and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]
        missing = [n for n in names if n not in own and n not in shared]
        if missing:
            raise TypeError(f"{cls.__name__}: no --help text for {', '.join(missing)}")
        unknown = sorted(set(own) - set(names))
        if unknown:
            raise TypeError(f"{cls.__name__}: --help text for {', '.join(unknown)}, which it does not take")
        lines = [f"    {n}: {own.get(n) or shared[n]}" for n in names]
        cls.__init__.__doc__ = f"The options of {cls.__name__}.\n\nArgs:\n" + "\n".join(lines)
        return cls

    return document
