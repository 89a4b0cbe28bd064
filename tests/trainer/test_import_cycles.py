"""The trainer's imports form a graph without cycles, and the trainer imports neither the web app nor
the task recipes (docs/architecture.md#inside-the-trainer).

The graph is grimp's (the library import-linter is built on): every import counts, those inside
functions too; only ``if TYPE_CHECKING:`` imports, which never run, are left out. Without cycles
means two things: no modules that import each other, however indirectly, and, as import-linter's
``acyclic_siblings`` contract has it, no two packages or modules of one package whose contents do.
"""

from __future__ import annotations

import grimp

from tests.import_graph import import_cycles, sibling_cycles

PACKAGE = "trainer"
UPSTREAM_PACKAGES = ("webapp", "tasks_lib")


def trainer_graph() -> grimp.ImportGraph:
    return grimp.build_graph(PACKAGE, exclude_type_checking_imports=True, cache_dir=None)


def test_the_cycle_finder_finds_a_cycle_of_three_modules() -> None:
    graph = grimp.ImportGraph()
    for importer, imported in [("p.a", "p.b"), ("p.b", "p.c"), ("p.c", "p.a"), ("p.c", "p.d")]:
        graph.add_import(importer=importer, imported=imported)
    assert import_cycles(graph) == [["p.a", "p.b", "p.c"]]


def test_the_sibling_check_finds_two_packages_whose_modules_import_each_other() -> None:
    graph = grimp.ImportGraph()
    for module in ["p", "p.a", "p.a.x", "p.a.w", "p.b", "p.b.y", "p.b.z"]:
        graph.add_module(module)
    for importer, imported in [("p.a.x", "p.b.y"), ("p.b.z", "p.a.w")]:
        graph.add_import(importer=importer, imported=imported)
    assert import_cycles(graph) == []
    assert sibling_cycles(graph) == [["p.a", "p.b"]]


def test_no_trainer_modules_import_each_other_in_a_cycle() -> None:
    cycles = import_cycles(trainer_graph())
    described = [f"{len(cycle)} modules: {', '.join(cycle)}" for cycle in cycles]
    assert cycles == [], "import cycles in trainer/:\n" + "\n".join(described)


def test_the_trainer_imports_neither_the_web_app_nor_the_task_recipes() -> None:
    graph = grimp.build_graph(PACKAGE, *UPSTREAM_PACKAGES, exclude_type_checking_imports=True, cache_dir=None)
    chains = [
        graph.find_shortest_chain(importer=PACKAGE, imported=upstream, as_packages=True)
        for upstream in UPSTREAM_PACKAGES
    ]
    assert [chain for chain in chains if chain] == []


def test_no_two_packages_or_modules_of_one_trainer_package_import_each_other() -> None:
    cycles = sibling_cycles(trainer_graph())
    assert cycles == [], "sibling cycles in trainer/: " + "; ".join(" <-> ".join(c) for c in cycles)
