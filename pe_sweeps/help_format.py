"""How every parser of the command line lays out its --help (light: jsonargparse only)."""

import textwrap

from jsonargparse import DefaultHelpFormatter


class WrappedHelpFormatter(DefaultHelpFormatter):
    """jsonargparse's help layout, with section headings wrapped between words to the help's width: a heading
    is a class docstring's first line (`cli.py sweep --help`'s SLURM options, `fit --help`'s data), which
    argparse prints on one line whatever its length."""

    def start_section(self, heading):
        if heading:
            width = max(self._width - self._current_indent - 1, 20)  # the ':' argparse appends
            heading = "\n".join(textwrap.wrap(heading, width, break_long_words=False, break_on_hyphens=False))
        super().start_section(heading)

    def _metavar_formatter(self, action, default_metavar):
        # a long list of choices ({copy,reverse,...}: the synthetic tasks; jsonargparse sets it as the metavar of a
        # Literal) is not one unbreakable word wider than the help: the option's name stands for it, and the help
        # text's `type:` lists the choices, wrapped
        metavar = action.metavar
        if isinstance(metavar, str) and metavar.startswith("{") and len(metavar) > self._width // 2:
            name = action.dest.rsplit(".", 1)[-1].upper()
            return lambda size: (name,) * size
        return super()._metavar_formatter(action, default_metavar)
