"""The layout is the architecture: the engine never needs Dagster; its folders are layers and
every import points down them (core < control < sinks, sql < planning < transaction < engine <
read < ops < client < the package < the Dagster adapter), with no circle between modules, not even
one closed by an import made only for type checking; a module's underscore names are its own; and
the pyiceberg internals we rely on are where ``pyiceberg_compat`` says."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ENGINE = "trident_resources"


def _engine_modules() -> list[str]:
    """Every module of the engine: ``trident_resources`` without its Dagster adapter."""
    found = []
    for path in sorted((ROOT / ENGINE).rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        if not module.startswith(f"{ENGINE}.dagster"):
            found.append(module)
    return found


ENGINE_MODULES = _engine_modules()


def test_the_engine_does_not_import_dagster() -> None:
    code = (
        "import importlib, sys\n"
        f"for m in {ENGINE_MODULES!r}: importlib.import_module(m)\n"
        "bad = sorted(m for m in sys.modules if m == 'dagster' or m.startswith('dagster.'))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"the engine imported Dagster: {out.stdout.strip()[:300]}"


def test_the_dagster_adapter_is_where_dagster_lives() -> None:
    code = "import sys, trident_resources.dagster\nprint('dagster' in sys.modules)\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"


def test_pyiceberg_internals_we_rely_on_still_exist() -> None:
    """If this fails after a pyiceberg upgrade, fix ``trident_resources/core/pyiceberg_compat.py``
    (and only it): each helper wraps one pyiceberg internal that has no public equivalent."""
    import pyarrow as pa
    from pyiceberg.table import Transaction

    try:
        from trident_resources.core import pyiceberg_compat as compat
    except ImportError as exc:  # pragma: no cover - the message is the point
        raise AssertionError(f"pyiceberg removed an internal that pyiceberg_compat imports: {exc}") from exc
    schema = compat.arrow_to_iceberg_without_ids(pa.schema([pa.field("a", pa.int64())]))
    assert [f.name for f in schema.fields] == ["a"]
    kwargs = compat.parquet_writer_kwargs({"write.parquet.compression-codec": "zstd"})
    assert kwargs.get("compression") == "zstd", f"pyiceberg's parquet writer options changed shape: {kwargs}"
    import inspect

    assert "self._table" in inspect.getsource(Transaction.__init__), (
        "pyiceberg's Transaction no longer keeps its table in _table: update pyiceberg_compat.transaction_io"
    )


def test_pyiceberg_snapshot_producer_internals_still_exist() -> None:
    """``pyiceberg_compat.overwrite_as`` builds pyiceberg's overwrite producer from an
    ``UpdateSnapshot``'s own fields and overrides its summary; if this fails after an upgrade,
    fix it there (the snapshot operations Trident records depend on it)."""
    import inspect

    from pyiceberg.table.update.snapshot import UpdateSnapshot, _OverwriteFiles, _SnapshotProducer

    source = inspect.getsource(UpdateSnapshot.__init__)
    for attr in ("_transaction", "_io", "_branch", "_snapshot_properties"):
        assert f"self.{attr} =" in source, f"pyiceberg's UpdateSnapshot no longer keeps {attr}: update overwrite_as"
    assert "summary=summary" in inspect.getsource(_SnapshotProducer._commit), (
        "pyiceberg's snapshot producer no longer takes its snapshot's summary from _summary: update overwrite_as"
    )
    assert issubclass(_OverwriteFiles, _SnapshotProducer)


def test_pyiceberg_internals_for_history_costs_still_exist() -> None:
    """``pyiceberg_compat.transaction`` and ``plan_live_files`` (issue 12: appends and reads that
    do not pay for a table's history) rely on: a Transaction's staged updates in ``_updates`` (a
    tuple replaced when it changes), ``update_table_metadata``'s replay of them, and DataScan's
    manifest planner."""
    import inspect

    from pyiceberg.table import DataScan, Transaction
    from pyiceberg.table.update import update_table_metadata

    from trident_resources.core import pyiceberg_compat as compat

    assert "update_table_metadata(self._table.metadata, self._updates)" in inspect.getsource(
        Transaction.table_metadata.fget  # type: ignore[attr-defined]
    ), "Transaction.table_metadata changed: update pyiceberg_compat._MemoTransaction"
    source = inspect.getsource(update_table_metadata)
    assert "_apply_table_update(update, new_metadata, context)" in source and "_update_table_metadata_log" in source, (
        "update_table_metadata changed: update pyiceberg_compat._staged_metadata"
    )
    assert "self._manifest_planner.plan_files(snapshot.manifests(self.io))" in inspect.getsource(DataScan), (
        "DataScan no longer plans through _manifest_planner: update pyiceberg_compat.plan_live_files"
    )
    assert callable(compat.plan_live_files) and callable(compat.transaction)


def test_pyiceberg_internals_for_storage_access_still_exist() -> None:
    """The storage-access modes rely on three pyiceberg internals (see ``pyiceberg_compat``):
    the REST session's default delegation header, FsspecFileIO's per-instance scheme table, and
    PyArrowFileIO's filesystem factory."""
    import inspect

    from pyiceberg.catalog.rest import RestCatalog
    from pyiceberg.io.fsspec import FsspecFileIO
    from pyiceberg.io.pyarrow import PyArrowFileIO

    from trident_resources.core import pyiceberg_compat as compat

    assert "X-Iceberg-Access-Delegation" in inspect.getsource(RestCatalog._config_headers), (
        "pyiceberg no longer sets the delegation header in _config_headers: update RestCatalogWithExplicitDelegation"
    )
    io = FsspecFileIO({})
    assert isinstance(io._scheme_to_fs, dict) and "s3" in io._scheme_to_fs
    compat.register_fsspec_scheme(io, "s3", lambda props: None)
    fs = compat.fresh_pyarrow_filesystems(PyArrowFileIO({}))("file", None)
    assert fs.type_name == "local"


def test_pyiceberg_commit_file_naming_still_exists() -> None:
    import inspect

    from pyiceberg.table.update.snapshot import _SnapshotProducer

    assert "commit_uuid=self.commit_uuid" in inspect.getsource(_SnapshotProducer), (
        "pyiceberg's snapshot producer no longer names its files by commit_uuid: update "
        "pyiceberg_compat.name_commit_files (discard finds a failed commit's manifests by that name)"
    )


PACKAGES = ("trident_resources", "trident_assets", "trident_sensors", "trident_cli")


def _module_name(path: Path, root: Path) -> str:
    return ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")


def _imported_from(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The absolute module a (possibly relative) ``from ... import`` names."""
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def test_no_module_uses_another_modules_private_names() -> None:
    """A helper one module of ours uses from another is a public name of its module: an
    underscore name is private to its module, so a split module reaching into its sibling's
    ``_helpers`` (``from .scans import _scan``, ``wap._drop_branch(...)``) is refused here."""
    root = Path(__file__).resolve().parents[2]
    files = [p for pkg in PACKAGES for p in (root / pkg).rglob("*.py")]
    ours = {_module_name(p, root) for p in files}
    found: list[str] = []
    for path in files:
        module = _module_name(path, root)
        tree = ast.parse(path.read_text(), str(path))
        aliases: dict[str, str] = {}  # local name -> our module it stands for
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom):
                continue
            source = _imported_from(node, module, path.name == "__init__.py")
            for a in node.names:
                if f"{source}.{a.name}" in ours:
                    aliases[a.asname or a.name] = f"{source}.{a.name}"
                elif source in ours and source != module and a.name.startswith("_") and not a.name.startswith("__"):
                    found.append(f"{module}: from {source} import {a.name}")
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases):
                continue
            if node.attr.startswith("_") and not node.attr.startswith("__") and aliases[node.value.id] != module:
                found.append(f"{module}:{node.lineno}: {node.value.id}.{node.attr}")
    assert not found, "private names used across modules (make them public names of their module):\n" + "\n".join(found)


# Each folder (or root module) of the engine and its layer: a module may import its own layer and
# the ones below, never one above. So no operation can take the public client (``client`` is above
# ``ops`` and ``read``), the control plane and the sinks know nothing of writes being planned, and
# the client is a door that only validates and calls one operation with the ``Engine``.
LAYERS: dict[str, int] = {
    "core": 0,  # pure rules and the vocabulary every layer shares: no I/O
    "control": 1,  # the control plane, its queries and migrations, locks, the router
    "sinks": 2,  # where rows are stored
    "sql": 2,  # the DuckDB sandbox and what a query may read
    "planning": 3,  # the write planner, merges, clustering, input readers
    "transaction": 4,  # INTENT -> WRITE -> COMMIT
    "engine": 5,  # what every operation takes
    "read": 6,  # reads: rows, versions, records, SQL
    "ops": 7,  # one module per verb
    "client": 8,  # the public door
    "": 9,  # the package's public names
    "dagster": 10,  # the Dagster adapter
}


def _layer(module: str) -> int:
    parts = module.split(".")
    return LAYERS[parts[1] if len(parts) > 1 else ""]


def import_graph() -> dict[str, set[str]]:
    """Every import between the engine's modules (top-level, in functions and under
    ``TYPE_CHECKING`` alike): ``from .pkg import mod`` points at ``pkg.mod`` when that is a module."""
    files = {}
    for path in (ROOT / ENGINE).rglob("*.py"):
        files[_module_name(path, ROOT)] = path
    graph: dict[str, set[str]] = {m: set() for m in files}
    for module, path in files.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                source = _imported_from(node, module, is_package)
                for a in node.names:
                    target = f"{source}.{a.name}" if f"{source}.{a.name}" in files else source
                    if target in files and target != module:
                        graph[module].add(target)
            elif isinstance(node, ast.Import):
                graph[module].update(a.name for a in node.names if a.name in files and a.name != module)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each a circle of imports."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_every_engine_folder_has_a_layer() -> None:
    folders = {m.split(".")[1] if m.count(".") else "" for m in import_graph()}
    assert folders <= set(LAYERS), f"give these folders a layer in LAYERS: {sorted(folders - set(LAYERS))}"


def test_no_module_imports_a_higher_layer() -> None:
    graph = import_graph()
    up = [f"{a} -> {b}" for a in sorted(graph) for b in sorted(graph[a]) if _layer(b) > _layer(a)]
    assert not up, "imports that point up a layer (move the shared part down, or the caller up):\n" + "\n".join(up)


def test_no_import_circle_between_modules() -> None:
    found = cycles(import_graph())
    assert not found, "modules that import each other, directly or round a circle (TYPE_CHECKING imports count):\n" + (
        "\n".join(" <-> ".join(group) for group in found)
    )


def test_no_operation_takes_the_public_client() -> None:
    """Only the package's public names and the Dagster adapter import the client."""
    graph = import_graph()
    takers = sorted(m for m, targets in graph.items() if f"{ENGINE}.client" in targets and _layer(m) <= LAYERS["client"])
    assert not takers, f"these modules import the public client: {takers}; take an Engine instead"


def test_the_checks_catch_a_circle() -> None:
    """The circle check itself: a graph with a TYPE_CHECKING-style back edge is found."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


PUBLIC_MODULES = ("trident_resources", "trident_resources.dagster")  # whose ``__all__`` is the public API


def _public_names(root: Path) -> dict[str, set[str]]:
    names: dict[str, set[str]] = {}
    for module in PUBLIC_MODULES:
        tree = ast.parse((root / module.replace(".", "/") / "__init__.py").read_text())
        exported = [
            node.value
            for node in tree.body
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)
        ]
        assert exported, f"{module}/__init__.py lists no __all__"
        names[module] = set(ast.literal_eval(exported[0]))
    return names


def library_imports_breaking_the_api(root: Path) -> list[str]:
    """Imports in ``trident_assets`` and ``trident_sensors`` (under ``root``) that reach past the
    public API of ``trident_resources``, and any import of ``trident_assets`` from
    ``trident_sensors``."""
    public = _public_names(root)
    found: list[str] = []
    for pkg in ("trident_assets", "trident_sensors"):
        for path in sorted((root / pkg).rglob("*.py")):
            module = _module_name(path, root)
            tree = ast.parse(path.read_text(), str(path))
            aliases: dict[str, str] = {}  # local name -> public module it stands for
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    imported = [(a.name, a.asname or a.name.split(".")[0]) for a in node.names]
                elif isinstance(node, ast.ImportFrom) and not node.level:
                    imported = [(node.module or "", "")]
                else:
                    continue
                for name, local in imported:
                    if pkg == "trident_sensors" and name.split(".")[0] == "trident_assets":
                        found.append(f"{module}:{node.lineno}: trident_sensors imports {name}")
                    if name.split(".")[0] != "trident_resources":
                        continue
                    if name not in public:
                        found.append(f"{module}:{node.lineno}: imports the internal module {name}")
                    elif isinstance(node, ast.ImportFrom):
                        private = sorted(a.name for a in node.names if a.name not in public[name] and a.name != "dagster")
                        found += [f"{module}:{node.lineno}: from {name} import {n} (not in its __all__)" for n in private]
                    elif local:
                        aliases[local] = name if node.names[0].asname else "trident_resources"
            for node in ast.walk(tree):
                if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
                    owner = aliases[node.value.id]
                    if node.attr not in public[owner] and not (owner == "trident_resources" and node.attr == "dagster"):
                        found.append(f"{module}:{node.lineno}: {node.value.id}.{node.attr} is not in {owner}'s __all__")
    return found


def test_assets_and_sensors_use_only_the_public_api() -> None:
    """``trident_assets`` (the library users declare with) and ``trident_sensors`` (generic
    automation) build on ``trident_resources`` as any user would: only names that its
    ``__init__`` or ``dagster/__init__`` export, so the engine's modules can move without them
    noticing. And the automation knows no assets: ``trident_sensors`` never imports
    ``trident_assets`` (the example's schedule lives in ``trident_assets.example``)."""
    found = library_imports_breaking_the_api(Path(__file__).resolve().parents[2])
    assert not found, "imports past trident_resources' public API (export the name deliberately):\n" + "\n".join(found)


def _forwarded_to(fn: ast.FunctionDef) -> str | None:
    """What a one-line forwarder hands its work to (``module.f``), if ``fn`` is one: a body
    (docstring aside) of one call of another module's function. A call of a member's method
    (``self.con.close()``) is the member's own business, not a second name for another module's."""
    body = fn.body[1:] if fn.body and isinstance(fn.body[0], ast.Expr) and isinstance(fn.body[0].value, ast.Constant) else fn.body
    if len(body) != 1 or not isinstance(body[0], (ast.Return, ast.Expr)):
        return None
    call = body[0].value
    if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Attribute):
        return None
    owner = call.func.value
    if isinstance(owner, ast.Name) and owner.id != "self":
        return f"{owner.id}.{call.func.attr}"
    return None


def sink_forwarders(root: Path) -> list[str]:
    """Public methods of the sinks' classes that only forward to another module or part and that
    no contract class (``sinks/contract.py``) declares: a caller should call the owner itself."""
    contract = ast.parse((root / ENGINE / "sinks" / "contract.py").read_text())
    declared = {
        c.name: {f.name for f in c.body if isinstance(f, ast.FunctionDef)} for c in contract.body if isinstance(c, ast.ClassDef)
    }
    found: list[str] = []
    for path in sorted((root / ENGINE / "sinks").rglob("*.py")):
        for cls in (n for n in ast.walk(ast.parse(path.read_text(), str(path))) if isinstance(n, ast.ClassDef)):
            allowed = set().union(*(declared.get(ast.unparse(b), set()) for b in cls.bases))
            for fn in cls.body:
                if isinstance(fn, ast.FunctionDef) and not fn.name.startswith("_") and fn.name not in allowed:
                    target = _forwarded_to(fn)
                    if target is not None:
                        found.append(f"{_module_name(path, root)}: {cls.name}.{fn.name} only calls {target}")
    return found


def test_sinks_have_no_one_line_forwarders_beyond_the_contract() -> None:
    """A sink implements the ``Sink`` contract; a method that only hands its arguments on to
    ``scans``, ``wap`` or ``committer`` and is not part of that contract is a second name for one
    thing, and a caller that should call the owning module directly."""
    found = sink_forwarders(ROOT)
    assert not found, "one-line forwarders outside the sink contract (call the owner directly):\n" + "\n".join(found)
