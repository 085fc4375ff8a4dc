"""Storage URLs: the sweep's default (one SQLite database per sweep file), and the passwords they may hold,
quoted for SQLAlchemy, hidden in every line printed (`redact_url`, `hide_secrets`) and found to warn about
(`url_password`)."""

from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

from pe_core.errors import ConfigError
from pe_sweeps import layout
from pe_sweeps.layout import study_db
from pe_sweeps.storages import journal_storage as journal

if TYPE_CHECKING:  # the sweep's options: a storage does not depend on the sweep that opens it
    from pe_sweeps.sweep.options import SweepOptions


def redact_url(url: str) -> str:
    """`url` with its password removed, from the userinfo (which may itself hold '@') and from the query."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        netloc = f"{userinfo.split(':', 1)[0]}{':***' if ':' in userinfo else ''}@{host}"
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    query = urlencode([(k, "***" if "password" in k.lower() else v) for k, v in pairs], safe="*")
    if (netloc, query) == (parts.netloc, urlencode(pairs)):
        return url  # nothing to hide (and sqlite:////abs/path keeps its slashes)
    return urlunsplit(parts._replace(netloc=netloc, query=query))


def quote_password(url: str) -> str:
    """`user:pa@ss@host` -> `user:pa%40ss@host`: SQLAlchemy splits userinfo at the first '@', so a raw '@'
    in a password would turn its tail into the host name (and print it in the error)."""
    parts = urlsplit(url)
    if "@" not in parts.netloc or ":" not in parts.netloc.rsplit("@", 1)[0]:
        return url
    userinfo, host = parts.netloc.rsplit("@", 1)
    user, password = userinfo.split(":", 1)
    return urlunsplit(parts._replace(netloc=f"{user}:{quote(unquote(password), safe='')}@{host}"))


def url_password(url: str) -> str:
    """The password written in a storage URL ('' when there is none)."""
    userinfo = urlsplit(url).netloc.rsplit("@", 1)[0] if "@" in urlsplit(url).netloc else ""
    given = [v for k, v in parse_qsl(urlsplit(url).query) if "password" in k.lower()]
    return userinfo.split(":", 1)[1] if ":" in userinfo else (given or [""])[0]


def hide_secrets(text: str, url: str) -> str:
    """`text` (an error message) with every password in `url` replaced, as written and URL-decoded."""
    parts = urlsplit(url)
    userinfo = parts.netloc.rsplit("@", 1)[0] if "@" in parts.netloc else ""
    secrets = [userinfo.split(":", 1)[1]] if ":" in userinfo else []
    secrets += [v for k, v in parse_qsl(parts.query) if "password" in k.lower()]
    text = text.replace(url, redact_url(url))
    for secret in sorted(filter(None, {*secrets, *map(unquote, secrets)}), key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


def storage_url(opts: "SweepOptions", storage_name: str) -> str:
    """--storage, else the SQLite database `<out_dir>/sweeps/<storage_name>/optuna.db`."""
    if opts.storage is not None and journal.is_journal_file(opts.storage):
        return str(Path(opts.storage).expanduser().resolve())  # children and --reseed stages run elsewhere
    if opts.storage is not None:
        check_sqlite_folder(opts.storage)
        return quote_password(opts.storage)
    path = study_db(opts.out_dir, storage_name)
    layout.make_dir(path.parent, "--out_dir")
    return f"sqlite:///{path.resolve()}"


def check_sqlite_folder(url: str) -> None:
    """A SQLite `--storage` in a folder that does not exist is refused, as a journal file's is: a typo is not
    created silently (its lock file would make the folder)."""
    import sqlalchemy

    try:
        backend = sqlalchemy.engine.make_url(url)
    except sqlalchemy.exc.ArgumentError:  # not a URL SQLAlchemy reads: opening the storage says so
        return
    if backend.get_backend_name() != "sqlite" or backend.database in (None, "", ":memory:"):
        return
    folder = Path(backend.database).parent
    if not folder.is_dir():
        raise ConfigError(f"cannot open sweep storage {redact_url(url)}: no folder {folder} for the SQLite database")
