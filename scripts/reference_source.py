"""Load named top-level classes and functions from a reference model file by path, without importing the
file's package (the parity scripts' references import their whole project: OLMo, transformers' relative
imports). Each definition is compiled from its own source in a namespace the caller provides."""

import ast
from pathlib import Path


def load_definitions(path: str, names: list[str], namespace: dict) -> dict:
    """Execute the top-level `class` / `def` statements called `names` of the Python file at `path`, in file
    order, in `namespace` (the names they use: torch, nn, stand-ins for the project's own); returns it."""
    source = Path(path).read_text()
    found = [node for node in ast.parse(source).body
             if isinstance(node, ast.ClassDef | ast.FunctionDef) and node.name in names]  # fmt: skip
    missing = set(names) - {node.name for node in found}
    if missing:
        raise SystemExit(f"{path} defines no {', '.join(sorted(missing))}; is it the reference file?")
    for node in found:
        node.decorator_list = [d for d in node.decorator_list if ast.unparse(d) != "torch.no_grad()"]
        exec(compile(ast.Module([node], []), path, "exec"), namespace)
    return namespace
