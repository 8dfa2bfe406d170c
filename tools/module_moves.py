#!/usr/bin/env python
"""Move modules and re-point every reference to them: imports (relative and absolute), dotted
paths in strings (monkeypatch targets, subprocess code, ``importlib`` names), file paths, and the
``parents[N]`` of a moved test that finds the repository root.

    python tools/module_moves.py --apply         # git mv every pending move, then rewrite the tree
    python tools/module_moves.py --rewrite-only  # only rewrite (a branch that merged the moves)

``MOVES`` is the map of old dotted module names to new ones. A branch that merged the moves can
re-run ``--rewrite-only`` to re-point its own new imports; a reference already at its new path is
left alone. Old paths get no shim: a missed reference fails at import, not later.
"""

from __future__ import annotations

import argparse
import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
R = "trident_resources"
T = "tests.trident_resources"

MOVES: dict[str, str] = {
    # the door
    f"{R}.facade": f"{R}.client",
    # core: pure rules and the vocabulary every layer shares
    f"{R}.errors": f"{R}.core.errors",
    f"{R}.keys": f"{R}.core.keys",
    f"{R}.identity": f"{R}.core.identity",
    f"{R}.schemas": f"{R}.core.schemas",
    f"{R}.partitions": f"{R}.core.partitions",
    f"{R}.filters": f"{R}.core.filters",
    f"{R}.validate": f"{R}.core.arguments",
    f"{R}.lru": f"{R}.core.recent",
    f"{R}.settings": f"{R}.core.settings",
    f"{R}.results": f"{R}.core.results",
    f"{R}.failpoints": f"{R}.core.failpoints",
    f"{R}.pyiceberg_compat": f"{R}.core.pyiceberg_compat",
    f"{R}.arrow_memory": f"{R}.core.arrow_memory",
    # control plane
    f"{R}.control_plane": f"{R}.control.plane",
    f"{R}.queries": f"{R}.control.queries",
    f"{R}.migrations": f"{R}.control.migrations",
    f"{R}.embedded_pg": f"{R}.control.embedded_pg",
    f"{R}.range_locks": f"{R}.control.range_locks",
    f"{R}.router": f"{R}.control.router",
    f"{R}.door": f"{R}.control.faults",
    # transaction
    f"{R}.transaction": f"{R}.transaction.driver",
    # planning
    f"{R}.planner": f"{R}.planning.planner",
    f"{R}.merge": f"{R}.planning.merge",
    f"{R}.clustering": f"{R}.planning.clustering",
    f"{R}.prefetch": f"{R}.planning.prefetch",
    f"{R}.inputs": f"{R}.planning.inputs",
    # operations, one module per verb
    f"{R}.write_records": f"{R}.ops.commit_records",
    f"{R}.adoption": f"{R}.ops.adopt",
    f"{R}.canary": f"{R}.ops.migrate",
    f"{R}.dataset_maintenance": f"{R}.ops.maintain",
    f"{R}.row_edit": f"{R}.ops.edits",
    f"{R}.manifest": f"{R}.ops.manifest",
    f"{R}.streaming": f"{R}.ops.stream_ingest",
    # reads
    f"{R}.versions": f"{R}.read.versions",
    f"{R}.sql": f"{R}.read.sql",
    f"{R}.sql_guard": f"{R}.sql.guard",
    f"{R}.reading": f"{R}.core.read_faults",
    # sinks
    f"{R}.sinks.base": f"{R}.sinks.contract",
    f"{R}.sinks.iceberg.maintenance": f"{R}.sinks.iceberg.purge",
    f"{R}.sinks.iceberg.commits": f"{R}.sinks.iceberg.committer",
    # the Dagster adapter
    f"{R}.dagster.partitions": f"{R}.dagster.partition_mapping",
    # test support in one package
    "tests.helpers": "tests.support.helpers",
    "tests.dagster_support": "tests.support.dagster_helpers",
    "tests.sinks_support": "tests.support.sink_helpers",
}

TEST_FOLDERS: dict[str, list[str]] = {
    "core": ["arrow_memory", "bad_input", "odd_inputs", "row_ids", "outside_edges", "probe_leftovers"],
    "control": [
        "control_plane",
        "embedded_pg",
        "postgres_faults",
        "partition_range_locks",
        "range_lock_values",
        "router_sql",
        "round_trips",
        "unreachable",
    ],
    "transaction": ["transactions", "core_faults", "concurrent_first_writes", "model_based"],
    "planning": ["clustering", "prefetch", "partition_planning", "bounded_memory"],
    "ops": [
        "write_modes",
        "partitions",
        "write_audit_publish",
        "canary",
        "stream_edit",
        "staged_stream",
        "maintenance",
        "maintain_safety",
        "storage_cleanup",
    ],
    "read": [
        "sql_direct_files",
        "sql_guard_scopes",
        "sql_limits",
        "sql_sandbox_reuse",
        "native_scans",
        "damaged_files",
        "history_costs",
        "describe_reuses_table",
    ],
    "sinks.pg": ["pg_blocks", "pg_blocks_parity", "pg_evolution", "pg_reads", "pg_sink", "pg_text_route"],
    "sinks.iceberg": [
        "clustered_files",
        "file_stats",
        "parquet_encoding",
        "row_groups",
        "row_id_uuid",
        "stats_missing_bounds",
        "table_ownership",
        "storage_credentials",
        "s3_faults",
        "lazy_boto3",
        "compaction",
        "bounds_repair",
    ],
}
for _folder, _names in TEST_FOLDERS.items():
    for _n in _names:
        MOVES[f"{T}.test_{_n}"] = f"{T}.{_folder}.test_{_n}"

PACKAGES = [f"{R}.migrations"]  # moved as folders
NEW_PACKAGES = sorted({m.rsplit(".", 1)[0] for m in MOVES.values()} | {f"{T}.{f}" for f in TEST_FOLDERS} | {f"{T}.sinks"})
SCANNED = ["trident_resources", "trident_assets", "trident_sensors", "trident_cli", "tests", "bench", "tools"]


def path_of(module: str, package: bool = False) -> Path:
    parts = module.split(".")
    return ROOT.joinpath(*parts) if package else ROOT.joinpath(*parts[:-1], parts[-1] + ".py")


def module_of(path: Path) -> tuple[str, bool]:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        return ".".join(parts[:-1]), True
    return ".".join(parts), False


def new_name(module: str) -> str:
    """The module's name after the moves (a module inside a moved package moves with it)."""
    if module in MOVES:
        return MOVES[module]
    for old, new in MOVES.items():
        if module.startswith(old + ".") and old in PACKAGES:
            return new + module[len(old) :]
    return module


def old_name(module: str) -> str:
    for old, new in MOVES.items():
        if new == module:
            return old
        if old in PACKAGES and module.startswith(new + "."):
            return old + module[len(new) :]
    return module


def git_mv() -> None:
    for pkg in NEW_PACKAGES:
        d = path_of(pkg, package=True)
        d.mkdir(parents=True, exist_ok=True)
        init = d / "__init__.py"
        if not init.exists():
            init.write_text("")
            subprocess.run(["git", "add", str(init)], cwd=ROOT, check=True)
    for old, new in MOVES.items():
        is_pkg = old in PACKAGES
        src, dst = path_of(old, is_pkg), path_of(new, is_pkg)
        if src.exists() and not dst.exists():
            subprocess.run(["git", "mv", str(src), str(dst)], cwd=ROOT, check=True)


# ---------------------------------------------------------------------------------------------
# rewriting
# ---------------------------------------------------------------------------------------------
_DOTTED = sorted(MOVES, key=len, reverse=True)
_DOTTED_RE = re.compile(r"(?<![\w.])(" + "|".join(re.escape(m) for m in _DOTTED) + r")(?![\w])")
_PATH_RE = re.compile(r"(?<![\w/])(" + "|".join(re.escape(m.replace(".", "/")) for m in _DOTTED) + r")(\.py|/)(?![\w])")


def _dotted(text: str) -> str:
    def sub(m: re.Match[str]) -> str:
        return MOVES[m.group(1)]

    def sub_path(m: re.Match[str]) -> str:
        return MOVES[m.group(1).replace("/", ".")].replace(".", "/") + m.group(2)

    return _PATH_RE.sub(sub_path, _DOTTED_RE.sub(sub, text))


def _resolve(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _relative(target: str, here: str, here_is_package: bool) -> tuple[int, str]:
    """``from <dots><rest>`` naming ``target`` from module ``here``."""
    pkg = here.split(".") if here_is_package else here.split(".")[:-1]
    tgt = target.split(".")
    common = 0
    while common < min(len(pkg), len(tgt)) and pkg[common] == tgt[common]:
        common += 1
    return len(pkg) - common + 1, ".".join(tgt[common:])


def _spell(target: str, relative: bool, here: str, here_is_package: bool) -> str:
    if relative and target.split(".")[0] == here.split(".")[0]:
        level, rest = _relative(target, here, here_is_package)
        return "." * level + rest
    return target


def _all_modules() -> set[str]:
    found = set()
    for top in SCANNED:
        for p in (ROOT / top).rglob("*.py"):
            if ".venv" in p.parts:
                continue
            found.add(module_of(p)[0])
    return found


def rewrite_file(path: Path, modules_now: set[str]) -> bool:
    text = path.read_text()
    here_new, is_pkg = module_of(path)
    here_old = old_name(here_new)
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return False
    lines = text.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))

    def pos(lineno: int, col: int) -> int:
        return offsets[lineno - 1] + len(lines[lineno - 1].encode()[:col].decode(errors="ignore"))

    old_modules = {old_name(m) for m in modules_now} | set(MOVES)
    edits: list[tuple[int, int, str]] = []
    renamed: dict[str, str] = {}  # local name -> new local name (a module imported by name)
    taken: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            for a in node.names:
                taken.add((a.asname or a.name).split(".")[0])
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            new_text = _dotted(ast.get_source_segment(text, node) or "")
            edits.append((pos(node.lineno, node.col_offset), pos(node.end_lineno, node.end_col_offset), new_text))  # type: ignore[arg-type]
            continue
        if not isinstance(node, ast.ImportFrom):
            continue
        source_old = _resolve(node, here_old, is_pkg)
        if not (
            source_old == R or source_old.startswith(R + ".") or source_old.startswith("tests") or source_old.startswith("bench")
        ):
            continue
        relative = bool(node.level)
        indent = " " * node.col_offset

        module_names = [a for a in node.names if f"{source_old}.{a.name}" in old_modules]
        if not module_names:
            seg = ast.get_source_segment(text, node) or ""
            target = new_name(source_old)
            new_head = f"from {_spell(target, relative, here_new, is_pkg)} import"
            new_seg = re.sub(r"^from\s+[.\w]+\s+import", new_head, seg, count=1)
            if new_seg != seg:
                edits.append((pos(node.lineno, node.col_offset), pos(node.end_lineno, node.end_col_offset), new_seg))  # type: ignore[arg-type]
            continue
        # names that are modules: each may now live in another package under another name
        stmts: list[str] = []
        plain = [a for a in node.names if a not in module_names]
        if plain:
            names = ", ".join(a.name + (f" as {a.asname}" if a.asname else "") for a in plain)
            stmts.append(f"from {_spell(new_name(source_old), relative, here_new, is_pkg)} import {names}")
        for a in module_names:
            target = new_name(f"{source_old}.{a.name}")
            parent, last = target.rsplit(".", 1)
            local = a.asname or a.name
            if a.asname is None and last != a.name:
                new_local = last
                if new_local in taken:
                    new_local = parent.rsplit(".", 1)[-1] + "_" + last
                renamed[a.name] = new_local
                taken.add(new_local)
                stmts.append(
                    f"from {_spell(parent, relative, here_new, is_pkg)} import {last}"
                    + (f" as {new_local}" if new_local != last else "")
                )
            else:
                stmts.append(
                    f"from {_spell(parent, relative, here_new, is_pkg)} import {last}" + (f" as {local}" if local != last else "")
                )
        new_text = ("\n" + indent).join(stmts)
        edits.append((pos(node.lineno, node.col_offset), pos(node.end_lineno, node.end_col_offset), new_text))  # type: ignore[arg-type]
    if renamed:
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and node.id in renamed:
                edits.append((pos(node.lineno, node.col_offset), pos(node.end_lineno, node.end_col_offset), renamed[node.id]))  # type: ignore[arg-type]
    edits.sort()
    out: list[str] = []
    at = 0
    for start, end, new in edits:
        if start < at:
            continue  # nested in an edit already made
        out.append(_dotted(text[at:start]))
        out.append(new)
        at = end
    out.append(_dotted(text[at:]))
    result = "".join(out)
    # a moved test finds the repository root deeper down
    old_depth = len(here_old.split("."))
    new_depth = len(here_new.split("."))
    if new_depth != old_depth:
        result = re.sub(
            r"Path\(__file__\)\.resolve\(\)\.parents\[(\d)\]",
            lambda m: f"Path(__file__).resolve().parents[{int(m.group(1)) + new_depth - old_depth}]",
            result,
        )
    if result != text:
        path.write_text(result)
        return True
    return False


def rewrite_tree() -> list[Path]:
    modules_now = _all_modules()
    changed = []
    for top in SCANNED:
        for p in sorted((ROOT / top).rglob("*.py")):
            if ".venv" in p.parts or p.resolve() == Path(__file__).resolve():
                continue
            if rewrite_file(p, modules_now):
                changed.append(p)
    for extra in [ROOT / "pyproject.toml"]:
        text = extra.read_text()
        new = _dotted(text)
        if new != text:
            extra.write_text(new)
            changed.append(extra)
    return changed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--apply", action="store_true")
    parser.add_argument("--rewrite-only", action="store_true")
    args = parser.parse_args()
    if args.apply:
        git_mv()
    if args.apply or args.rewrite_only:
        for p in rewrite_tree():
            print("rewrote", p.relative_to(ROOT))
    else:
        parser.print_help()
        sys.exit(2)


if __name__ == "__main__":
    main()
