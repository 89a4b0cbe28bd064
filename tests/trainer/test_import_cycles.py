"""The trainer's imports form a graph without cycles, and the trainer imports neither the web app nor
the task recipes (docs/architecture.md#inside-the-trainer).

The graph is grimp's (the library import-linter is built on): every import counts, those inside
functions too; only ``if TYPE_CHECKING:`` imports, which never run, are left out. Without cycles
means two things: no modules that import each other, however indirectly, and, as import-linter's
``acyclic_siblings`` contract has it, no two packages or modules of one package whose contents do.
"""

from __future__ import annotations

import grimp

PACKAGE = "trainer"
UPSTREAM_PACKAGES = ("webapp", "tasks_lib")


def trainer_graph() -> grimp.ImportGraph:
    return grimp.build_graph(PACKAGE, exclude_type_checking_imports=True, cache_dir=None)


def import_cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    lowest: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = lowest[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            module, targets = work[-1]
            target = next(targets, None)
            if target is not None:
                if target not in index:
                    index[target] = lowest[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph.find_modules_directly_imported_by(target)))))
                elif target in on_stack:
                    lowest[module] = min(lowest[module], index[target])
                continue
            work.pop()
            if work:
                lowest[work[-1][0]] = min(lowest[work[-1][0]], lowest[module])
            if lowest[module] == index[module]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == module:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))
    return cycles


def sibling_cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """For every package, the cycles among its children, each child standing for itself and all it holds."""
    cycles: list[list[str]] = []
    for package in sorted(m for m in graph.modules if graph.find_children(m)):
        owner: dict[str, str] = {}
        for child in graph.find_children(package):
            owner.update(dict.fromkeys({child, *graph.find_descendants(child)}, child))
        siblings = grimp.ImportGraph()
        for module, child in owner.items():
            siblings.add_module(child)
            for imported in graph.find_modules_directly_imported_by(module):
                if owner.get(imported, child) != child:
                    siblings.add_import(importer=child, imported=owner[imported])
        cycles += import_cycles(siblings)
    return cycles


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
