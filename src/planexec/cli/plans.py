"""The plan library's commands: ``planexec plans save|list|show|diff|delete|export|import`` and ``run --template``.

Owns parsing and printing for the library; everything else is
`library` (templates, values, diffs), `library_file` (the export file) and the run store
(where templates are kept). ``run --template NAME[@VERSION] -p NAME=VALUE``
only turns the template into a plan (`template_plan`): `plan_files` then
validates it against the registry, reviews it with the policies and runs
it exactly like ``run --plan FILE``, with no planner and no model call.
The store is chosen by ``--store``, ``PLANEXEC_STORE``, ``store`` in
planexec.toml, else ``.planexec/runs.db``. A store, run, template or file
that is not there, and bad parameters, are a `common.UsageError` (exit 2)
that stores nothing. Thin: it calls `library` and the store.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rich.table import Table

from planexec import Plan
from planexec.cli import _common as common
from planexec.cli import history
from planexec.errors import PlanValidationError, StoreError
from planexec.library import (
    TemplateError,
    diff_templates,
    export_templates,
    import_templates,
    instantiate,
    parse_values,
    save_run_template,
)
from planexec.plan import plan_table
from planexec.store import RunStore, Template, open_store, store_target

__all__ = ["add_library_commands", "add_template_options", "check_template_args", "template_plan"]

_STORE_HELP = "the run store: a file, sqlite:///path or postgresql://... (default: $PLANEXEC_STORE, planexec.toml, .planexec/runs.db)"
_VALUE_HELP = "a parameter: NAME=TEXT, or NAME:=JSON for a typed value (-p replicas:=3); repeatable"


def add_template_options(p: argparse.ArgumentParser) -> None:
    """``--template NAME[@VERSION]`` and ``-p NAME=VALUE`` for ``planexec run``."""
    p.add_argument("--template", metavar="NAME[@VERSION]", help="run a saved plan template (planexec plans) instead of planning a goal")
    p.add_argument("-p", "--param", dest="template_params", action="append", default=[], metavar="NAME=VALUE", help=_VALUE_HELP)
    p.set_defaults(store=None)  # the template's store: ``--store`` where the parser has it, else the configured one


def add_library_commands(sub: Any) -> None:
    """Register ``plans`` and its actions on the CLI's subcommands."""
    top = sub.add_parser(
        "plans", help="the plan library: save a run's approved plan as a template; list, show, diff, delete, export, import"
    )
    actions = top.add_subparsers(dest="plans_action", required=True, metavar="ACTION")

    def action(name: str, help: str, command: Any) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = actions.add_parser(name, help=help)
        p.add_argument("--store", metavar="STORE", help=common.STORE_HELP)
        p.set_defaults(command=command)
        return p

    p = action("save", "save a run's latest approved plan as the next version of template NAME", cmd_save)
    p.add_argument("run_id", metavar="RUN_ID")
    p.add_argument("template_name", metavar="NAME")
    p.add_argument(
        "--param", action="append", default=[], metavar="NAME[=VALUE]",
        help="NAME=VALUE: every VALUE in the plan's text becomes {{NAME}} (NAME:=JSON: whole values equal to it); "
        "NAME alone: the plan already writes {{NAME}}; repeatable",
    )  # fmt: skip
    p.add_argument("--description", default="", metavar="TEXT", help="what the template is for")
    p.add_argument("--json", action="store_true", help="print the saved template as JSON")
    p = action("list", "list templates: name, versions, parameters, description", cmd_list)
    p.add_argument("--json", action="store_true", help="print every version as a JSON list")
    p = action("show", "one template: its plan as a table, its parameters and its versions", cmd_show)
    p.add_argument("template_name", metavar="NAME")
    p.add_argument("--version", type=int, metavar="N", help="this version (default: the latest)")
    p.add_argument("--json", action="store_true", help="print the template as JSON")
    p = action("diff", "what changed between two versions of a template", cmd_diff)
    p.add_argument("template_name", metavar="NAME")
    p.add_argument("old", type=int, metavar="V1")
    p.add_argument("new", type=int, metavar="V2")
    p.add_argument("--json", action="store_true", help="print the diff as JSON")
    p = action("delete", "delete one version of a template, or all of them", cmd_delete)
    p.add_argument("template_name", metavar="NAME")
    p.add_argument("--version", type=int, metavar="N", help="only this version (default: every version)")
    p = action("export", "write a template's versions to a JSON file to share", cmd_export)
    p.add_argument("template_name", metavar="NAME")
    p.add_argument("-o", "--output", metavar="FILE", help="the file to write (default: standard output)")
    p.add_argument("--version", type=int, metavar="N", help="only this version (default: every version)")
    p = action("import", "store the versions in an exported JSON file as new versions of its template", cmd_import)
    p.add_argument("file", metavar="FILE")
    p.add_argument("--name", dest="as_name", metavar="NAME", help="import under this name instead of the file's")


# --- run --template -----------------------------------------------------------------


def check_template_args(args: argparse.Namespace) -> None:
    """`common.UsageError` when ``run --template`` (or ``-p``) comes with what it cannot take."""
    if args.template is None:
        raise common.UsageError("-p gives a template's parameters: use it with --template NAME")
    if args.goal is not None or args.plan is not None:
        raise common.UsageError("--template runs a saved plan: give no GOAL and no --plan")
    if args.mode is not None or args.stream:
        raise common.UsageError("--mode and --stream are for planning a GOAL; a template runs as written")


def template_plan(args: argparse.Namespace) -> Plan | None:
    """The plan ``run --template NAME[@VERSION] -p ...`` asks for, filled in; None after printing its problems."""
    name, at, number = args.template.partition("@")
    version = _version(number) if at else None
    try:
        values, _ = parse_values(args.template_params)
    except TemplateError as exc:
        raise common.UsageError(str(exc)) from None
    store = _open(args)
    try:
        template = store.template(name, version)
    except StoreError as exc:
        raise common.UsageError(str(exc)) from None
    finally:
        store.close()
    try:
        plan = instantiate(template, values)
    except TemplateError as exc:
        raise common.UsageError(str(exc)) from None
    except PlanValidationError as exc:
        common.print_problems(exc.problems, exc.plan_id, as_json=args.json)
        return None
    given = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in values.items()) or "no parameters"
    common.say(f"template {template.name!r} v{template.version} with {given}: plan {plan.plan_id} (no planner)", stderr=True)
    return plan


# --- plans ... ----------------------------------------------------------------------


def cmd_save(args: argparse.Namespace) -> int:
    """``planexec plans save RUN_ID NAME --param ...``: the run's approved plan as a new template version."""
    try:
        values, declared = parse_values(args.param, bare=True)
    except TemplateError as exc:
        raise common.UsageError(str(exc)) from None
    store = _open(args)
    try:
        saved = save_run_template(store, args.run_id, args.template_name, values=values, declared=declared, description=args.description)
    except (TemplateError, StoreError) as exc:
        raise common.UsageError(str(exc)) from None
    finally:
        store.close()
    if args.json:
        print(saved.to_json(indent=2))
        return common.EXIT_OK
    t = saved.template
    common.say(f"saved template {t.name!r} version {t.version} from plan v{saved.plan_version} of run {saved.run_id} in {store.location}")
    for name, places in saved.occurrences.items():
        given = f" = {json.dumps(values[name], ensure_ascii=False)}" if name in values else " (already a placeholder)"
        common.say(f"  {{{{{name}}}}}{given}: {len(places)} place(s): {', '.join(places)}")
    if not saved.occurrences:
        common.say("  no parameters: it runs as saved")
    return common.EXIT_OK


def cmd_list(args: argparse.Namespace) -> int:
    """``planexec plans list``: one row per template (its latest version), or every version as JSON."""
    store = _open(args, missing_ok=True)
    templates = _read(store, lambda s: s.templates()) if store is not None else []
    if args.json:
        common.emit(json.dumps([t.to_dict() for t in templates], indent=2, ensure_ascii=False))
        return common.EXIT_OK
    if not templates:
        common.say("no plan templates saved here yet" + (f" ({store.location})" if store is not None else ""))
        return common.EXIT_OK
    latest: dict[str, Template] = {}
    count: dict[str, int] = {}
    for t in templates:
        latest[t.name] = t
        count[t.name] = count.get(t.name, 0) + 1
    table = Table(title=f"plan templates in {store.location if store else ''}", title_justify="left")
    for column in ("name", "latest", "versions", "parameters", "steps", "from run", "saved (UTC)", "description"):
        table.add_column(column, overflow="fold")
    for name, t in latest.items():
        table.add_row(name, f"v{t.version}", str(count[name]), ", ".join(t.params), str(len(t.plan.get("steps", []))),
                      t.source_run_id or "", f"{t.created_at:%Y-%m-%d %H:%M}", t.description)  # fmt: skip
    common.console().print(table)
    return common.EXIT_OK


def cmd_show(args: argparse.Namespace) -> int:
    """``planexec plans show NAME [--version N]``: the plan as a table, its parameters and every version."""
    store = _open(args)
    template, versions = _read(store, lambda s: (s.template(args.template_name, args.version), s.templates(args.template_name)))
    if args.json:
        common.emit(json.dumps({**template.to_dict(), "versions": [_brief(v) for v in versions]}, indent=2, ensure_ascii=False))
        return common.EXIT_OK
    common.say(
        f"template {template.name!r} version {template.version} of {len(versions)}"
        + (f": {template.description}" if template.description else "")
    )
    common.say(f"  parameters: {', '.join('{{' + p + '}}' for p in template.params) or 'none'}")
    common.console().print(plan_table(Plan.from_data(template.plan)))
    for v in versions:
        mark = "*" if v.version == template.version else " "
        common.say(f"{mark} v{v.version} · saved {v.created_at:%Y-%m-%d %H:%M:%S} UTC · params {', '.join(v.params) or 'none'}"
             + (f" · from run {v.source_run_id}" if v.source_run_id else "") + (f" · {v.description}" if v.description else ""))  # fmt: skip
    return common.EXIT_OK


def cmd_diff(args: argparse.Namespace) -> int:
    """``planexec plans diff NAME V1 V2``: parameters, steps and fields that changed."""
    store = _open(args)
    old, new = _read(store, lambda s: (s.template(args.template_name, args.old), s.template(args.template_name, args.new)))
    diff = diff_templates(old, new)
    if args.json:
        print(diff.to_json(indent=2))
    else:
        common.say(diff.render() if not diff.empty else f"template {args.template_name!r}: v{args.old} and v{args.new} are the same")
    return common.EXIT_OK


def cmd_delete(args: argparse.Namespace) -> int:
    """``planexec plans delete NAME [--version N]``: one version or every version."""
    store = _open(args)
    deleted = _read(store, lambda s: s.delete_template(args.template_name, args.version))
    what = f"version {args.version} of" if args.version is not None else f"{deleted} version(s) of"
    common.say(f"deleted {what} template {args.template_name!r}")
    return common.EXIT_OK


def cmd_export(args: argparse.Namespace) -> int:
    """``planexec plans export NAME [-o FILE] [--version N]``: the export file (see `library`)."""
    store = _open(args)
    templates = _read(
        store, lambda s: [s.template(args.template_name, args.version)] if args.version is not None else s.templates(args.template_name)
    )
    if not templates:
        raise common.UsageError(f"no template {args.template_name!r} in {store.location}")
    text = json.dumps(export_templates(templates), indent=2, ensure_ascii=False) + "\n"
    if args.output is None:
        sys.stdout.write(text)
        return common.EXIT_OK
    try:
        Path(args.output).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise common.UsageError(f"cannot write {args.output!r}: {exc.strerror or exc}") from None
    common.say(f"exported {len(templates)} version(s) of template {args.template_name!r} to {args.output}", stderr=True)
    return common.EXIT_OK


def cmd_import(args: argparse.Namespace) -> int:
    """``planexec plans import FILE [--name NAME]``: each version in the file becomes a new version here."""
    if not Path(args.file).is_file():
        raise common.UsageError(f"no file {args.file!r}")
    store = _open(args, create=True)
    try:
        saved = import_templates(store, args.file, name=args.as_name)
    except (TemplateError, StoreError) as exc:
        raise common.UsageError(str(exc)) from None
    finally:
        store.close()
    numbers = ", ".join(f"v{t.version}" for t in saved)
    common.say(f"imported {args.file} as template {saved[0].name!r} {numbers} in {store.location}")
    return common.EXIT_OK


# --- plumbing -------------------------------------------------------------------------


def _open(args: argparse.Namespace, *, create: bool = False, missing_ok: bool = False) -> Any:
    """The store to read (`history`'s way: never created, None when `missing_ok` and no file yet), or `create`d for an import."""
    if not create:
        return history._open(args, missing_ok=missing_ok)
    try:
        return open_store(store_target(args.store, common.config().store), create=True)
    except StoreError as exc:
        raise common.store_error(exc) from None


def _read(store: RunStore, read: Any) -> Any:
    """`read(store)`, with store errors (an unknown template or version among them) as usage errors; closes the store."""
    try:
        return read(store)
    except StoreError as exc:
        raise common.UsageError(str(exc)) from None
    finally:
        store.close()


def _brief(t: Template) -> dict[str, Any]:
    return {
        "version": t.version,
        "params": t.params,
        "created_at": t.created_at.isoformat(),
        "description": t.description,
        "source_run_id": t.source_run_id,
    }


def _version(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise common.UsageError(f"a template version is a whole number from 1, not {text!r} (NAME@VERSION)")
    return int(text)
