"""The package's shape: imports point one way, modules stay small, names have one home."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import torch
from helpers import REPO
from transformer_lens.utilities import get_act_name

from invperm_interp import BlockName, Layout, ModelConfig, Stream, hook_name
from invperm_interp.model.hooked import HookedDisentangledTransformer

SRC = REPO / "src" / "invperm_interp"
MAX_LINES = 400


def _module_name(path: Path) -> str:
    parts = ("invperm_interp", *path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1]) if parts[-1] == "__init__" else ".".join(parts)


def _type_only(tree: ast.AST) -> set[int]:
    """The ids of the nodes under ``if TYPE_CHECKING:``: imports for annotations, never run."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            out |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return out


def import_graph() -> dict[str, set[str]]:
    """Module → the package modules it imports anywhere in its body (function-level imports too:
    a deferred import is still a dependency; one under ``if TYPE_CHECKING:`` runs never and is not)."""
    modules = {_module_name(p): p for p in SRC.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree = ast.parse(path.read_text())
        skip = _type_only(tree)
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                    base = f"{base}.{node.module}" if node.module else base
                else:
                    base = node.module or ""
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                           for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            graph[name] |= {t for t in targets if t in modules and t != name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_cycle_finder_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_the_import_graph_sees_relative_and_deferred_imports():
    graph = import_graph()
    assert "invperm_interp.runs.checkpoint" in graph["invperm_interp.model.hooked"]  # from ..runs import
    assert "invperm_interp.training.single" in graph["invperm_interp.cli.main"]  # inside a function


def test_no_import_cycle_in_the_package():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def stage_order() -> dict[str, int]:
    """docs/design.md section 8's stage table: stage (``"top"`` for the top-level modules, else the
    subpackage) → its place in the order."""
    text = (REPO / "docs" / "design.md").read_text()
    rows = re.findall(r"^\| (\d+) \| (?:`(\w+)/`|the top-level modules) \|", text, re.M)
    return {folder or "top": int(order) for order, folder in rows}


def _stage(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and (SRC / parts[1]).is_dir()) else "top"


def test_imports_follow_the_stage_order_of_the_design():
    """Every import points to a stage at or below its own in docs/design.md's table (the package's
    own ``__init__``, the public surface, re-exports from any stage)."""
    order = stage_order()
    stages = {p.parent.name for p in SRC.glob("*/__init__.py")} | {"top"}
    assert set(order) == stages, f"the design's table lists {sorted(order)}, the package has {sorted(stages)}"
    against = sorted(f"{a} -> {b}" for a, targets in import_graph().items() if a != "invperm_interp"
                     for b in targets if order[_stage(b)] > order[_stage(a)])
    assert against == [], "imports against the stage order (docs/design.md section 8)"


def test_the_stage_order_check_sees_an_import_against_it():
    order = stage_order()
    assert order["top"] < order["runs"] < order["model"] < order["training"] < order["sweep"]
    assert _stage("invperm_interp.memory") == "top" and _stage("invperm_interp.viz.index") == "viz"
    assert _stage("invperm_interp.viz") == "viz"
    assert order[_stage("invperm_interp.runs.checkpoint")] < order[_stage("invperm_interp.training.optim")]


def test_the_top_level_holds_value_types_and_every_stage_is_a_documented_subpackage():
    modules = sorted(p.stem for p in SRC.glob("*.py") if p.stem != "__init__")
    assert len(modules) <= 8, f"the top level should hold the value types only: {modules}"
    packages = sorted(p.parent.name for p in SRC.glob("*/__init__.py"))
    assert {"model", "maths", "runs", "training", "sweep", "analysis", "viz", "cli"} <= set(packages)
    for name in packages:
        doc = ast.get_docstring(ast.parse((SRC / name / "__init__.py").read_text()))
        assert doc and len(doc.split()) >= 8, f"{name}/__init__.py should say what the stage holds"


def test_the_tests_mirror_the_stages():
    stages = {p.parent.name for p in SRC.glob("*/__init__.py")}
    folders = {p.name for p in (REPO / "tests").iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert stages - {"cli"} <= folders and "cli" in folders, f"tests/ lacks {stages - folders}"
    assert len(list((REPO / "tests").glob("test_*.py"))) <= 8  # the value types' tests and this one


def _imports_of(path: Path) -> list[tuple[str, bool]]:
    """``(module, deferred)`` for every import in ``path``: deferred when inside a function."""
    tree, found = ast.parse(path.read_text()), []

    def visit(node: ast.AST, deferred: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = deferred or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            if isinstance(child, ast.Import):
                found.extend((a.name, deferred) for a in child.names)
            elif isinstance(child, ast.ImportFrom) and not child.level:
                found.append((child.module or "", deferred))
            visit(child, inner)

    visit(tree, False)
    return found


def test_nothing_under_training_imports_transformer_lens():
    """Training processes stay small: TransformerLens is imported only through the hooked model,
    and under ``training/`` only where ``Run.model`` asks for it (a deferred import)."""
    graph = import_graph()
    hooked = "invperm_interp.model.hooked"
    for path in (SRC / "training").rglob("*.py"):
        name = _module_name(path)
        assert not any(m.startswith("transformer_lens") for m, _ in _imports_of(path)), name
        top_level = {m for m, deferred in _imports_of(path) if not deferred}
        assert not any(m.startswith("transformer_lens") for m in top_level), name
        if hooked in graph[name]:
            assert name == "invperm_interp.training.run", f"{name} imports the hooked model"
    run_imports = ast.parse((SRC / "training" / "run.py").read_text())
    deferred = [n for f in ast.walk(run_imports) if isinstance(f, ast.FunctionDef)
                for n in ast.walk(f) if isinstance(n, ast.ImportFrom) and n.module == "model.hooked"]
    assert deferred, "Run.model should import the hooked model inside the property"


def test_the_analyses_and_the_report_import_neither_the_hooked_model_nor_transformer_lens():
    """The analyses read weights and run plain forwards (``model.disentangled.DisentangledModel``),
    so nothing under ``analysis/`` or ``viz/`` imports TransformerLens or a module that does, not
    even deferred; patching gets its hooks through ``model.build.with_hooks``. The running check
    is ``tests/cli/test_cli_startup.py``."""
    graph = import_graph()
    hooked = {f"invperm_interp.model.{m}" for m in ("hooked", "standard_hooked", "cache", "export",
                                                     "standard_export")}
    for stage in ("analysis", "viz"):
        for path in (SRC / stage).rglob("*.py"):
            name = _module_name(path)
            assert not any(m.startswith("transformer_lens") for m, _ in _imports_of(path)), name
            assert not hooked & graph[name], f"{name} imports {sorted(hooked & graph[name])}"


def test_each_run_directory_file_name_is_spelled_once():
    names = ("config.json", "metrics.jsonl", "final.safetensors", "diverged.json", "mechanism.json",
             "analysis.json", "report.html", ".invperm.lock", "sweep.jsonl")
    counts = {n: 0 for n in names}
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                for n in names:
                    counts[n] += node.value == n
    assert counts == {n: 1 for n in names}, counts


def test_no_module_is_too_long():
    long = {str(p.relative_to(SRC)): n for p in SRC.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines (probably two ideas each): {long}"


# -- names ------------------------------------------------------------------------------------------
def test_hook_names_follow_transformer_lens():
    cfg = ModelConfig(Layout.plain(3), n_layers=2)
    model = HookedDisentangledTransformer(cfg)
    per_layer = ("resid_pre", "q", "k", "v", "attn_scores", "pattern", "z", "attn_out", "resid_post")
    names = [hook_name(kind) for kind in ("embed", "pos_embed", "readout")]
    names += [hook_name(kind, layer) for kind in per_layer for layer in range(2)]
    assert set(names) == set(model.hook_dict)  # every hook point, each named once
    assert hook_name("pattern", 1) == "blocks.1.attn.hook_pattern"
    assert hook_name("attn", 0) == hook_name("pattern", 0)  # TransformerLens's aliases
    assert hook_name("scores", 0) == "blocks.0.attn.hook_attn_scores"
    assert hook_name("attn_out", 1) == get_act_name("attn_out", 1)
    for kind in ("q", "k", "v", "z", "pattern", "resid_pre", "resid_post"):
        assert hook_name(kind, 1) == get_act_name(kind, 1)
    with pytest.raises(ValueError, match="hook kind must be one of"):
        hook_name("mlp_out", 0)
    with pytest.raises(ValueError, match="needs layer"):
        hook_name("pattern")
    with pytest.raises(ValueError, match="has no layer"):
        hook_name("embed", 0)


@pytest.mark.parametrize("heads", [(1, 1), (2, 1), (1, 3)])
def test_block_names_are_parsed_once_and_print_back(heads):
    stream = Stream(Layout.scratch(2), heads)
    for layer in range(len(heads) + 1):
        for block in stream.blocks(layer):
            assert str(block.parts) == block.name
            assert BlockName.parse(block.name) == block.parts
            assert block.parts.is_position == (block.name.split(".")[-2:-1] == ["pos"])
        copies = stream.copies(layer)
        assert len(copies) == torch.tensor([1 + h for h in heads[:layer]]).prod()
        assert all([b.parts.base for b in blocks] == ["x", "pos.P", "pos.Y", "pos.S"]
                   for blocks in copies.values())


def test_block_name_parts():
    name = BlockName.parse("L2.L1h0.pos.P")
    assert name.path == ((2, None), (1, 0)) and name.segment == "P"
    assert name.prefix == "L2.L1h0." and name.base == "pos.P" and name.is_position
    assert str(BlockName().copied(1)) == "L1.x"
    with pytest.raises(ValueError, match="block name must look like"):
        BlockName.parse("L1.y")


def test_config_properties():
    cfg = ModelConfig(Layout.of(3, "0", "P", "Y", "0"), attention_dir="causal", readout="P")
    assert cfg.causal and cfg.readout_rows == slice(3, 6)
    assert not ModelConfig(Layout.plain(3), attention_dir="bidirectional").causal


def test_every_design_citation_points_into_the_repository():
    root = SRC.parent.parent
    design = root / "docs" / "design.md"
    sections = {int(line.split()[1].rstrip(".")) for line in design.read_text().splitlines()
                if line.startswith("## ") and line.split()[1].rstrip(".").isdigit()}
    outside = ("DESIGN" + ".md", "../" + "shared")  # spelled apart so this file does not match
    files = [root / "README.md", root / "Makefile", root / "pyproject.toml"]
    files += [p for folder in ("src", "tests", "analyses", "benchmarks")
              for p in (root / folder).rglob("*") if p.suffix in (".py", ".sh", ".md")]
    for path in files:
        text = path.read_text()
        assert not any(s in text for s in outside), f"{path} cites a file outside the repository"
        for cited in re.findall(r"docs/design\.md,? section (\d+)", text):
            assert int(cited) in sections, f"{path} cites docs/design.md section {cited}"
    assert "docs/design.md" in (root / "README.md").read_text()


#: Where "none" or "borderline" may be written outside the verdict's module, and why.
VERDICT_WORDS_ELSEWHERE = {
    "maths/constructions.py": "RESERVED: the names register refuses (held equal to UNNAMED below)",
    "analysis/mechanism.py": "the record's 'borderline' key: the constructions that straddle",
    "viz/sweep.py": "matplotlib's facecolors='none'",
    "viz/html.py": "matplotlib's svg.fonttype='none' (text kept as text in SVG)",
}


def _string_constants(tree: ast.AST) -> list[str]:
    """The module's string constants, its docstrings left out."""
    docs = {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and node.body and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)}
    return [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)
            and isinstance(n.value, str) and id(n) not in docs]


def test_the_rules_verdict_words_are_written_in_its_module_only():
    """A mechanism's name is a construction or None; "none" and "borderline" are verdicts, spelled
    in ``analysis.verdict`` alone, and no construction may take either name."""
    from invperm_interp.analysis.verdict import UNNAMED
    from invperm_interp.maths.constructions import RESERVED

    assert set(RESERVED) == set(UNNAMED)
    found = {}
    for path in SRC.rglob("*.py"):
        name = path.relative_to(SRC).as_posix()
        words = [s for s in _string_constants(ast.parse(path.read_text()))
                 if s.lower() in ("none", "borderline")]
        if words and name != "analysis/verdict.py":
            found[name] = words
    assert set(found) <= set(VERDICT_WORDS_ELSEWHERE), {
        k: v for k, v in found.items() if k not in VERDICT_WORDS_ELSEWHERE}
    assert set(VERDICT_WORDS_ELSEWHERE) <= set(found), "an exception no longer needed"


MAX_PARAMETERS = 8


def test_no_function_takes_more_than_eight_parameters():
    """Settings that travel together are one value (``analysis.verdict.Rule``,
    ``viz.report.ReportContext``, ``maths.registry.Wiring``, ``analysis.patch.Sites``,
    ``analysis.minimal.ExactSearch``, ``analysis.pursuit.PursuitLimits``), not a run of parameters
    threaded through every caller."""
    found = {}
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                names = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg)
                         if x is not None and x.arg not in ("self", "cls")]
                if len(names) > MAX_PARAMETERS:
                    found[f"{path.relative_to(SRC).as_posix()}:{node.name}"] = len(names)
    assert found == {}


#: The keys of the records' facts (``runs.evaluation.Evaluation``, ``analysis.mechanism.Mechanism``
#: and the records around it, ``sweep.collect.SweepRow``) that readers take as attributes, never by
#: string (SweepRow's other keys, "name", "status", "model", …, name other things too).
RECORD_KEYS = {"mse", "causal_floor", "entry_acc", "row_acc", "sample_acc", "train_mse", "wall_time",
               "stopped", "verdict", "also_faithful", "borderline", "tested", "untested", "minimal",
               "names_by_batch", "loss_recovered", "rows_exact", "faithful", "mechanism_refused"}


def _string_key_reads(tree: ast.AST) -> list[tuple[int, str]]:
    """``(line, key)`` of every ``x["key"]`` and ``x.get("key")``, and ``(line, "to_dict()")``
    of every ``….to_dict()[…]``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript):
            value = node.value
            if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) \
                    and value.func.attr == "to_dict":
                found.append((node.lineno, "to_dict()"))
            if isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
                found.append((node.lineno, node.slice.value))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr == "get" and node.args and isinstance(node.args[0], ast.Constant):
            found.append((node.lineno, node.args[0].value))
    return found


def test_no_record_is_read_by_string_key_outside_the_module_that_writes_it():
    """A record is read through its attributes: a key of a record's facts is read by string only in
    a module that writes that key (the record's own ``from_dict``, a report reading back its own
    rows), and no ``to_dict()`` result is indexed (read the attribute instead)."""
    root = SRC.parent.parent
    found = {}
    for path in [*SRC.rglob("*.py"), *(root / "analyses").glob("*.py")]:
        tree = ast.parse(path.read_text())
        written = {k.value for n in ast.walk(tree) if isinstance(n, ast.Dict) for k in n.keys
                   if isinstance(k, ast.Constant)}
        bad = sorted({f"{key}:{line}" for line, key in _string_key_reads(tree)
                      if key == "to_dict()" or key in RECORD_KEYS and key not in written})
        if bad:
            found[path.relative_to(root).as_posix()] = bad
    assert found == {}, found


def test_the_record_key_check_sees_a_metrics_record_read_by_key():
    tree = ast.parse('def f(run):\n    return run.metrics[-1]["mse"], run.final.get("causal_floor"), '
                     'run.to_dict()["step"]\n')
    assert {k for _, k in _string_key_reads(tree)} == {"mse", "causal_floor", "to_dict()", "step"}


# -- one architecture seam --------------------------------------------------------------------------
#: Where an architecture's name may be compared outside ``architecture``, and why: guards of a
#: model's own input, each refusing a configuration of another architecture in one line. Every
#: dispatch goes through ``cfg.architecture``.
ARCH_GUARDS = {
    "model/standard.py": "StandardTransformer refuses another architecture's configuration",
    "model/note_map.py": "the map takes the standard model only",
    "model/standard_export.py": "the export takes the standard model only",
}


def _arch_dispatch(tree: ast.AST) -> list[int]:
    """Lines that ask which architecture a configuration names: a comparison (``==``, ``!=``,
    ``in``, ``is``) with ``….arch``, ``arch``, ``getattr(…, "arch")`` or an architecture's name, a
    ``match`` on one, or a table indexed by one (``ARCHITECTURES[…]``, ``…[cfg.arch]``)."""
    from invperm_interp.architecture import ARCHS

    def arch_like(node: ast.AST) -> bool:
        return (isinstance(node, ast.Attribute) and node.attr == "arch"
                or isinstance(node, ast.Name) and node.id in ("arch", "ARCHITECTURES")
                or isinstance(node, ast.Constant) and node.value in ARCHS
                or isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id == "getattr" and len(node.args) > 1
                and isinstance(node.args[1], ast.Constant) and node.args[1].value == "arch")

    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and any(map(arch_like, [node.left, *node.comparators])):
            found.append(node.lineno)
        elif isinstance(node, ast.Match) and arch_like(node.subject):
            found.append(node.lineno)
        elif isinstance(node, ast.Subscript) and (arch_like(node.value) or arch_like(node.slice)):
            found.append(node.lineno)
    return found


def test_the_architecture_is_asked_in_its_module_only():
    """``cfg.architecture`` (one ``architecture.Architecture`` per architecture) is the one seam:
    no module but ``architecture`` compares ``arch`` or indexes a table by it, the model guards in
    :data:`ARCH_GUARDS` aside."""
    found = {}
    for path in SRC.rglob("*.py"):
        name = path.relative_to(SRC).as_posix()
        lines = _arch_dispatch(ast.parse(path.read_text()))
        if lines and name != "architecture.py":
            found[name] = lines
    assert set(found) <= set(ARCH_GUARDS), {k: v for k, v in found.items() if k not in ARCH_GUARDS}
    assert set(ARCH_GUARDS) <= set(found), "a guard no longer needed"


def test_the_architecture_check_sees_every_spelling():
    source = ('a = cfg.arch == "standard"\nb = "standard" != m.cfg.arch\nc = arch in ("x",)\n'
              'd = getattr(cfg, "arch", None) != "standard"\ne = TABLE[cfg.arch]\n'
              'f = ARCHITECTURES["standard"]\ng = kind == "disentangled"\nh = cfg.d == 3\n'
              'match cfg.arch:\n    case _:\n        pass\n')
    assert sorted(set(_arch_dispatch(ast.parse(source)))) == [1, 2, 3, 4, 5, 6, 7, 9]


def test_each_architecture_provides_what_its_docstring_asks():
    from typing import get_args

    import invperm_interp.model as model_package
    from invperm_interp.architecture import ARCHITECTURES, ARCHS, Arch, ArchitectureFields

    assert ARCHS == get_args(Arch) and list(ARCHITECTURES) == list(ARCHS)
    own = [f for a in ARCHITECTURES.values() for f in a.fields]
    assert len(own) == len(set(own)) and set(own) <= set(ArchitectureFields.__dataclass_fields__)
    assert [a.named_in_json for a in ARCHITECTURES.values()].count(False) == 1  # the default
    for name, arch in ARCHITECTURES.items():
        assert arch.name == name
        plain, hooked = getattr(model_package, arch.plain), getattr(model_package, arch.hooked)
        assert callable(plain.made_on) and callable(hooked.from_module)
        if arch.note_map is not None:
            mapping = __import__(f"invperm_interp.model.{arch.note_map}", fromlist=["_"])
            for function in ("check_mappable", "disentangled_config", "to_disentangled", "map_summary"):
                assert callable(getattr(mapping, function)), (name, function)
        cfg = ModelConfig(Layout.plain(3), n_layers=2, n_heads=(1, 2), arch=name)
        assert cfg.architecture is arch and ModelConfig.from_dict(cfg.to_dict()) == cfg
        assert arch.n_params(cfg) == sum(p.numel() for p in plain(cfg, seed=0).parameters())
        family, units = arch.step_units(cfg)
        assert family and units > 0 and arch.forward_elements(cfg, 2) > 0
