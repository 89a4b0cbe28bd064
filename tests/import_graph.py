"""Cycles in an import graph (grimp's, the library import-linter is built on): modules that import one
another round, and packages or modules of one package whose contents do. Used by
tests/test_architecture.py and tests/trainer/test_import_cycles.py."""

from __future__ import annotations

import grimp


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
