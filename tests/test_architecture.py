"""No import cycle inside our packages (docs/architecture.md#layers). The layers of the web apps and
what the trainer and the recipes may not import are import-linter contracts in pyproject.toml
(`lint-imports`, which `make lint` and `make test` run); this test adds what a contract does not
say: no group of modules anywhere in a package imports itself round.

The graph is grimp's, import-linter's own: imports inside functions count (they run), those under
``if TYPE_CHECKING:`` do not (they never run). A cycle is a strongly connected component of more
than one module."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import grimp
import pytest

# The packages whose modules import one another one way only.
ACYCLIC_PACKAGES = ["webapp", "tasks_lib"]
# Still cyclic, to move into ACYCLIC_PACKAGES once it is not: trainer/config.py imports the backends,
# presets and model loader that import it back (21 modules), and trainer.rewards <-> trainer.tools.http.
NOT_YET_ACYCLIC_PACKAGES = ["trainer"]


def import_cycles(modules: Iterable[str], imported_by: Callable[[str], Iterable[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative so a
    deep package cannot exhaust the stack), each sorted, in sorted order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    cycles: list[list[str]] = []
    for root in sorted(modules):
        if root in index:
            continue
        work = [(root, iter(sorted(imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            module, targets = work[-1]
            target = next(targets, None)
            if target is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[module])
                if low[module] == index[module]:
                    component = _pop_component(stack, on_stack, module)
                    if len(component) > 1:
                        cycles.append(sorted(component))
            elif target not in index:
                index[target] = low[target] = len(index)
                stack.append(target)
                on_stack.add(target)
                work.append((target, iter(sorted(imported_by(target)))))
            elif target in on_stack:
                low[module] = min(low[module], index[target])
    return sorted(cycles)


def _pop_component(stack: list[str], on_stack: set[str], root: str) -> list[str]:
    component = []
    while True:
        module = stack.pop()
        on_stack.discard(module)
        component.append(module)
        if module == root:
            return component


def package_cycles(package: str) -> list[list[str]]:
    graph = grimp.build_graph(package, exclude_type_checking_imports=True, cache_dir=None)
    return import_cycles(graph.modules, graph.find_modules_directly_imported_by)


@pytest.mark.parametrize("package", ACYCLIC_PACKAGES)
def test_no_modules_of_the_package_import_one_another_round(package: str) -> None:
    assert package_cycles(package) == []


def test_the_cycle_finder_finds_each_cycle_and_not_a_module_that_only_imports_into_one() -> None:
    graph = grimp.ImportGraph()
    imports = [("p.models", "p.tasks"), ("p.tasks", "p.models"), ("p.views", "p.models")]
    imports += [("p.a", "p.b"), ("p.b", "p.c"), ("p.c", "p.a")]
    for importer, imported in imports:
        graph.add_import(importer=importer, imported=imported, line_number=1, line_contents="import")
    found = import_cycles(graph.modules, graph.find_modules_directly_imported_by)
    assert found == [["p.a", "p.b", "p.c"], ["p.models", "p.tasks"]]


def test_a_package_still_cyclic_is_named_as_such_until_it_is_not() -> None:
    # Once a package listed as not yet acyclic loses its cycles, it moves to ACYCLIC_PACKAGES.
    still = {package: len(package_cycles(package)) for package in NOT_YET_ACYCLIC_PACKAGES}
    assert all(still.values()), (
        f"no cycle left: move {[p for p, n in still.items() if not n]} to ACYCLIC_PACKAGES"
    )
