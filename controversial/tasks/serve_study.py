"""``python serve_study.py study_dir=<bundle> completion_code=<CODE>``, ``mode=export`` for CSV files, or
``mode=token admin_token_file=<path>`` to make an admin token."""

from __future__ import annotations

import gc
import logging
import os
import re
from collections.abc import Iterator, Sequence
from pathlib import Path

import uvicorn
from sqlalchemy.engine import make_url

from controversial.atomic import atomic_write
from controversial.errors import UserError
from controversial.records.csvfile import csv_chunks
from controversial.study.admin_token import ENV_VAR, AdminTokenError, read_admin_token, write_admin_token
from controversial.study.bundle import load_bundle
from controversial.study.data_dictionary import write_description
from controversial.study.db import default_database_url, is_in_memory
from controversial.study.guards import MaskTokens
from controversial.study.http_protocol import uvicorn_config
from controversial.study.pnas_export import TABLES, snapshot
from controversial.study.quality import QualitySettings
from controversial.study.server import ServeStudySettings, create_app
from controversial.tasks import Invocation

log = logging.getLogger(__name__)


def export_csvs(
    study_dir: str | Path,
    database_url: str | None,
    out_dir: str | Path,
    include_incomplete: bool = False,
    quality: QualitySettings = QualitySettings(),
    command: str = "",
) -> dict[str, Path]:
    """Write responses.csv (PNAS format), attention.csv and participants.csv from one database snapshot,
    readable by the owner only (Prolific ids are personal data), and print what each holds; then the data
    dictionary and Psych-DS description of every CSV file in ``out_dir`` (``study/data_dictionary.py``),
    recording ``command``.

    Reads through the read-only engine, so exporting next to a running server does not block it. A study that
    was never served has no database: that is an error, and nothing is created (no empty database, no
    header-only files).
    """
    bundle = load_bundle(study_dir)
    out_dir = Path(out_dir)
    url = database_url or default_database_url(bundle.root)
    _check_database_exists(url, bundle.label, database_url is None)
    written, counts = {}, {}
    with snapshot(url) as session:
        for name, (columns, rows) in TABLES.items():
            subjects: set[str] = set()
            n = 0

            def counted(items: Iterator[list]) -> Iterator[list]:
                nonlocal n
                for row in items:
                    n += 1
                    subjects.add(str(row[0]))
                    yield row

            with atomic_write(out_dir / name, "w", private=True, encoding="utf-8", newline="") as handle:
                for chunk in csv_chunks(columns, counted(rows(session, bundle, include_incomplete, quality))):
                    handle.write(chunk)
            written[name], counts[name] = out_dir / name, (n, len(subjects))
    (ratings, raters), (checks, _), (participants, _) = (counts[name] for name in TABLES)
    print(f"exported {ratings} rating rows from {raters} participant(s) to {written['responses.csv']}")
    print(f"  {checks} attention-check rows to attention.csv, {participants} participant(s) to participants.csv")
    if not ratings:
        scope = (
            ""
            if include_incomplete
            else " (only completed participants are exported; export.include_incomplete=true adds the others)"
        )
        print(f"  no ratings yet{scope}")
    dictionary, description = write_description(out_dir, bundle, command)
    print(f"  every column described in {dictionary.name}; Psych-DS metadata in {description.name}")
    return written


def before_hydra(argv: Sequence[str]) -> None:
    """Refuse the admin token on the command line ``argv``, before Hydra echoes it or writes it to the run's
    records (and ``ps`` shows it to every user); then make everything this process creates (the run dir, its
    log, the database) readable by the owner only. The entry point calls it (``cli.command``); the API does not."""
    for arg in argv:
        if _names_admin_token(arg):
            raise UserError(
                "admin_token cannot be given on the command line, where `ps`, the shell history and the run's "
                "records would keep it: put it in a file and pass admin_token_file=<path> (`python serve_study.py "
                f"mode=token admin_token_file=<path>` writes a new one), or set ${ENV_VAR}"
            )
    os.umask(0o077)


def _names_admin_token(arg: str) -> bool:
    """Whether ``arg`` overrides the admin token in any spelling Hydra accepts or echoes: a ``+``/``~`` prefix, a
    package (``admin_token@_global_``), quotes, spaces, a dotted path, a flag (``--admin-token``), any case."""
    key = arg.split("=", 1)[0].split("@", 1)[0]
    return re.sub(r"[^a-z0-9.]", "", key.lower()).rsplit(".", 1)[-1] == "admintoken"


def _check_database_exists(url: str, label: str, default: bool) -> None:
    """A SQLite file that is not there means the study was never served (or the path is wrong): say so, before
    opening it would create an empty one."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or is_in_memory(url):
        return
    if parsed.database is None or Path(parsed.database).is_file():  # None is in memory, checked above
        return
    where = "the bundle's default database" if default else "database_url"
    raise UserError(
        f"{parsed.database}: no database yet ({where}): study {label} has not been served, so there is nothing "
        "to export; serve it first (python serve_study.py study_dir=... completion_code=...), or pass the "
        "database_url= it was served with"
    )


def run(cfg: ServeStudySettings, invocation: Invocation) -> None:
    """Serve the study (until stopped); ``mode=export`` writes its CSV files into the run dir; ``mode=token``
    writes a new admin token file."""
    if cfg.mode == "token":
        if not cfg.admin_token_file:
            raise AdminTokenError("mode=token needs admin_token_file=<path>, the file to create (mode 0600)")
        path = write_admin_token(cfg.admin_token_file)
        log.info("wrote a new admin token to %s; serve with admin_token_file=%s", path, path)
        return
    if cfg.study_dir is None:
        raise UserError("study_dir is required: a bundle written by export_study.py")
    if cfg.mode == "export":
        export_csvs(
            cfg.study_dir,
            cfg.database_url,
            cfg.export.out_dir or invocation.out_dir,
            cfg.export.include_incomplete,
            cfg.quality,
            invocation.command,
        )
        return
    if not cfg.completion_code:
        raise UserError(
            "completion_code is not set: pass completion_code=<CODE> (from the study's page on "
            "Prolific) or set PROLIFIC_COMPLETION_CODE"
        )
    if not (cfg.vendor_path / "jspsych" / "dist").is_dir():
        raise UserError(f"jsPsych not found under {cfg.vendor_path}: run `npm ci` in human_study/ first")
    admin_token = read_admin_token(cfg.admin_token_file)
    app = create_app(cfg, admin_token)
    logging.getLogger("uvicorn.access").addFilter(MaskTokens())  # access_log=true writes request paths
    # Everything allocated so far (imports, the app, the bundle: about half a million objects, torch among
    # them) lives as long as the process: move it out of the cyclic collector's reach, so its full
    # collections scan only request garbage instead of pausing every request for hundreds of ms.
    gc.freeze()
    log.info(
        "serving %s on http://%s:%d/ (admin export %s)",
        app.state.bundle.label,
        cfg.host,
        cfg.port,
        "enabled" if admin_token else "disabled",
    )
    config = uvicorn_config(
        app,
        cfg.host,
        cfg.port,
        proxy_headers=True,
        forwarded_allow_ips=cfg.forwarded_allow_ips,
        access_log=cfg.access_log,
    )
    uvicorn.Server(config).run()
