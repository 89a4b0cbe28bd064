"""No import cycle inside our packages (docs/architecture.md#layers). The layers of the web apps and
what the trainer and the recipes may not import are import-linter contracts in pyproject.toml
(`lint-imports`, which `make lint` and `make test` run); this test adds what a contract does not
say: no group of modules anywhere in a package imports itself round, and no two packages or
modules of one package import each other through their contents.

The graph is grimp's, import-linter's own: imports inside functions count (they run), those under
``if TYPE_CHECKING:`` do not (they never run). The cycle finders are tests/import_graph.py's,
tested in tests/trainer/test_import_cycles.py."""

from __future__ import annotations

import grimp
import pytest

from tests.import_graph import import_cycles, sibling_cycles

# The packages whose modules import one another one way only: all of ours.
ACYCLIC_PACKAGES = ["webapp", "trainer", "tasks_lib"]


def package_graph(package: str) -> grimp.ImportGraph:
    return grimp.build_graph(package, exclude_type_checking_imports=True, cache_dir=None)


@pytest.mark.parametrize("package", ACYCLIC_PACKAGES)
def test_no_modules_of_the_package_import_one_another_round(package: str) -> None:
    cycles = import_cycles(package_graph(package))
    assert cycles == [], f"import cycles in {package}/: " + "; ".join(", ".join(c) for c in cycles)


@pytest.mark.parametrize("package", ACYCLIC_PACKAGES)
def test_no_two_packages_or_modules_of_one_package_import_each_other(package: str) -> None:
    cycles = sibling_cycles(package_graph(package))
    assert cycles == [], f"sibling cycles in {package}/: " + "; ".join(" <-> ".join(c) for c in cycles)
